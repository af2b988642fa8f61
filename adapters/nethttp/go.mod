module github.com/quotagate/quotagate/adapters/nethttp

go 1.26

require (
	github.com/felixge/httpsnoop v1.1.0
	github.com/quotagate/quotagate/engine v0.0.0
)

replace github.com/quotagate/quotagate/engine => ../../engine
