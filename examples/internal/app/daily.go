package app

import (
	"fmt"
	"time"
	_ "time/tzdata" // -tz works without the system's zoneinfo

	limit "github.com/quotagate/quotagate/engine"
)

// DailyPerDay and DailyPerSecond are GET /v1/daily's quotas: 20 per
// calendar day in the zone of -tz, 2 per second.
const (
	DailyPerDay    = 20
	DailyPerSecond = 2
)

// dailyLimiter builds GET /v1/daily's limiter, derived from global: per
// X-API-Key (by client address without one), DailyPerSecond per second and
// DailyPerDay per calendar day in the zone c.TZ names (default UTC), all
// or nothing; it returns the zone's name. An unknown zone is an error
// naming -tz.
func dailyLimiter(global *limit.Limiter, c Config, d limit.Disclosure, s limit.HeaderStyle, f limit.FailureMode) (*limit.Limiter, string, error) {
	name := c.TZ
	if name == "" {
		name = "UTC"
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, "", fmt.Errorf("-tz %q: %w", c.TZ, err)
	}
	l, err := global.With(limit.Policy{
		Name: "daily", Algorithm: limit.FixedWindow, KeyFunc: APIKey, Shadow: c.Shadow,
		Quotas:     []limit.Rate{{Limit: DailyPerSecond, Window: time.Second}, {Limit: DailyPerDay, Per: limit.Day, Location: loc}},
		Disclosure: d, HeaderStyle: s, FailureMode: f,
	})
	if err != nil {
		return nil, "", fmt.Errorf("daily policy: %w", err)
	}
	return l, loc.String(), nil
}
