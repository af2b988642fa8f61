package echolimit_test

import (
	"testing"

	"github.com/quotagate/quotagate/tests/clienttest"
)

// The client transport against this router's middleware, over loopback.
func TestLimitClient(t *testing.T) { clienttest.Run(t, harness{}) }
