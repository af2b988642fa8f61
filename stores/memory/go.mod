module github.com/quotagate/quotagate/stores/memory

go 1.26

require github.com/quotagate/quotagate/engine v0.0.0

replace github.com/quotagate/quotagate/engine => ../../engine
