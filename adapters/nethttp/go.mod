module github.com/quotagate/quotagate/adapters/nethttp

go 1.26

require (
	github.com/quotagate/quotagate/conformance v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0-00010101000000-000000000000
)

replace (
	github.com/quotagate/quotagate/conformance => ../../conformance
	github.com/quotagate/quotagate/engine => ../../engine
	github.com/quotagate/quotagate/stores/memory => ../../stores/memory
)
