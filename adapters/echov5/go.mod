module github.com/quotagate/quotagate/adapters/echov5

go 1.26.0

require (
	github.com/labstack/echo/v5 v5.4.4
	github.com/quotagate/quotagate/engine v0.0.0
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	golang.org/x/net v0.59.0 // indirect
)

replace github.com/quotagate/quotagate/engine => ../../engine
