module github.com/quotagate/quotagate/adapters/chi

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/quotagate/quotagate/adapters/nethttp v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
)

require github.com/felixge/httpsnoop v1.1.0 // indirect

replace github.com/quotagate/quotagate/engine => ../../engine

replace github.com/quotagate/quotagate/adapters/nethttp => ../nethttp
