package conformance

import (
	"testing"
	"time"

	limit "github.com/quotagate/quotagate/engine"
	"github.com/quotagate/quotagate/engine/limittest"
)

// otpBlockScenario is the examples' POST /v1/otp: 3 failed attempts per 5 s
// per client (fixed window, only failures counted), the attempt that finds
// them spent blocks the client for 8 s, a repeat offence 16 s (BlockMax);
// a blocked client gets 429 even on the route that would succeed, with the
// time left on the block as Retry-After, while another client is served;
// the block outlasts the window; Peek shows it and Reset lifts it.
func otpBlockScenario() Scenario {
	ok := func(c string) Step {
		return Step{Client: c, Method: "POST", Path: "/v1/otp/ok", Want: Want{Status: 204}}
	}
	fail := Step{Client: "127.0.0.2", Method: "POST", Path: "/v1/otp/fail", Want: Want{Status: 401}}
	blocked := func(path, retry string) Step {
		return Step{Client: "127.0.0.2", Method: "POST", Path: path, Want: Want{Status: limited, Handler: "not-run",
			Header: map[string]string{"Retry-After": retry}}}
	}
	return Scenario{
		Name: "37-otp-blocks-a-client-past-its-failures",
		Policies: map[string]limit.Policy{"o": {Name: "otp", Algorithm: limit.FixedWindow, Limit: 3, Window: 5 * time.Second,
			AlignWindows: true, CountStatus: func(s int) bool { return s >= 400 },
			BlockFor: 8 * time.Second, BlockMax: 16 * time.Second}},
		App: AppSpec{Routes: []RouteSpec{
			{Method: "POST", Path: "/v1/otp/ok", Mounts: []string{"o"}, Status: 204},
			{Method: "POST", Path: "/v1/otp/fail", Mounts: []string{"o"}, Status: 401},
		}},
		Steps: []Step{
			times(ok("127.0.0.2"), 5),
			times(fail, 3),
			{Admin: &Admin{Policy: "o", Identity: "127.0.0.2", Allowed: false, Remaining: 0, Blocked: true, RetryAfter: 8 * time.Second}},
			blocked("/v1/otp/fail", "8"),
			blocked("/v1/otp/ok", "8"),
			ok("127.0.0.3"),
			after(5*time.Second, blocked("/v1/otp/ok", "3")), // a new window: the quota is back, the block is not
			{Admin: &Admin{Policy: "o", Identity: "127.0.0.2", Allowed: false, Remaining: 0, Blocked: true, RetryAfter: 3 * time.Second}}, // nothing left until the block ends
			after(3*time.Second, ok("127.0.0.2")), // the block ended
			times(fail, 3),
			blocked("/v1/otp/ok", "16"), // a repeat offence: twice as long
			{Admin: &Admin{Policy: "o", Identity: "127.0.0.2:9", Reset: true}},
			{Admin: &Admin{Policy: "o", Identity: "127.0.0.2", Allowed: true, Remaining: 2}},
			ok("127.0.0.2"),
			fail,
		},
	}
}

// blocksAsTheModels runs limittest.CheckBlocks on the store: Limiters
// whose policies block, driven through ConsumeN, Peek and Reset, every
// Decision field by field as the brute-force models say.
func blocksAsTheModels(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	s := newStore(t, clock.Now)
	resetter(t, s)
	// The readings never fall behind real time: a Redis row's keys expire
	// on the server's own clock.
	set := limittest.RealTimeFloor(func(ms int64) { clock.Set(time.UnixMilli(ms)) })
	limittest.CheckBlocks(t, s, limittest.BlockRun{Start: epoch.UnixMilli(), Set: set,
		Seed: 36, Rounds: 12, Scale: 50, Options: []limit.Option{limit.WithKeyPrefix("conformance")}})
}

// unsettledChargesHoldOffBlocks runs limittest.CheckUnsettledCharges on
// the store: under a policy counting only failures, successes in flight
// (concurrent ones included) never begin a block, failures do, and a
// charge never finished counts once its lease ends; at exact instants of
// the fake clock (the scenario is over in a fraction of a second of real
// time, far within every key's time to live).
func unsettledChargesHoldOffBlocks(t *testing.T, newStore NewStoreFunc) {
	clock := limittest.NewClock(epoch)
	s := newStore(t, clock.Now)
	resetter(t, s) // the scenario Peeks
	limittest.CheckUnsettledCharges(t, s, limittest.BlockRun{Start: epoch.UnixMilli(),
		Set:     func(ms int64) int64 { clock.Set(time.UnixMilli(ms)); return ms },
		Options: []limit.Option{limit.WithKeyPrefix("conformance")}})
}
