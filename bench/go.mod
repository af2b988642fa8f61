module github.com/quotagate/quotagate/bench

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/go-chi/httprate v0.16.1
	github.com/quotagate/quotagate/adapters/chi v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
)

require (
	github.com/klauspost/cpuid/v2 v2.2.10 // indirect
	github.com/zeebo/xxh3 v1.0.2 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace (
	github.com/quotagate/quotagate/adapters/chi => ../adapters/chi
	github.com/quotagate/quotagate/conformance => ../conformance
	github.com/quotagate/quotagate/engine => ../engine
	github.com/quotagate/quotagate/stores/memory => ../stores/memory
	github.com/quotagate/quotagate/stores/redis => ../stores/redis
)
