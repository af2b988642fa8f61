package breaker_test

import (
	"testing"

	"github.com/quotagate/quotagate/tests/fibertest"
	"go.uber.org/goleak"
)

// Every test's servers are stopped, and waited for, when it ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, fibertest.LeakOptions...) }
