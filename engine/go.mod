module github.com/quotagate/quotagate/engine

go 1.26
