package memstore_test

import (
	"testing"
	"time"

	"github.com/quotagate/quotagate/conformance"
	limit "github.com/quotagate/quotagate/engine"
	memstore "github.com/quotagate/quotagate/stores/memory"
)

func TestConformance(t *testing.T) {
	conformance.RunStore(t, func(t testing.TB, clock func() time.Time) limit.Store {
		s, err := memstore.New(memstore.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
