module github.com/quotagate/quotagate/stores/redis

go 1.26

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/quotagate/quotagate/conformance v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/sys v0.47.0 // indirect
)

replace (
	github.com/quotagate/quotagate/conformance => ../../conformance
	github.com/quotagate/quotagate/engine => ../../engine
	github.com/quotagate/quotagate/stores/memory => ../memory
)
