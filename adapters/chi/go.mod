module github.com/quotagate/quotagate/adapters/chi

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/quotagate/quotagate/adapters/nethttp v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
)

require (
	github.com/quotagate/quotagate/conformance v0.0.0
	github.com/quotagate/quotagate/stores/redis v0.0.0
)

require (
	github.com/felixge/httpsnoop v1.1.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace (
	github.com/quotagate/quotagate/adapters/nethttp => ../nethttp
	github.com/quotagate/quotagate/conformance => ../../conformance
	github.com/quotagate/quotagate/engine => ../../engine
	github.com/quotagate/quotagate/stores/memory => ../../stores/memory
	github.com/quotagate/quotagate/stores/redis => ../../stores/redis
)
