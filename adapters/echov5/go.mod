module github.com/quotagate/quotagate/adapters/echov5

go 1.26

require (
	github.com/labstack/echo/v5 v5.4.4
	github.com/quotagate/quotagate/engine v0.0.0
)

replace github.com/quotagate/quotagate/engine => ../../engine
