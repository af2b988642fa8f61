module github.com/quotagate/quotagate/examples

go 1.26

require (
	github.com/go-chi/chi/v5 v5.5.0
	github.com/quotagate/quotagate/adapters/chi v0.0.0
	github.com/quotagate/quotagate/engine v0.0.0
	github.com/quotagate/quotagate/stores/memory v0.0.0
)

replace (
	github.com/quotagate/quotagate/adapters/chi => ../adapters/chi
	github.com/quotagate/quotagate/engine => ../engine
	github.com/quotagate/quotagate/stores/memory => ../stores/memory
)
