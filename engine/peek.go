package limit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/quotagate/quotagate/engine/limitstore"
)

// Peek returns the Decision a request of cost 1 by identity would get now
// (Allowed, Outcome, Remaining, ResetAfter, RetryAfter, ResetAt, the plan,
// and Blocked: a block in force, or the one the request would begin, with
// its RetryAfter; see Policy.BlockFor), with every quota of the identity's
// plan considered, and writes nothing:
// no key is created, no count nor time to live changes, no Decision event
// is emitted, Finish gives nothing back for it. Remaining is what such a
// request, admitted, would leave (one less than is left now). Under
// Policy.Shadow a Decision the store would limit is reported as
// OutcomeShadowLimited and Allowed, as a request would get. Under
// Policy.MaxWait a request that would reserve its slot and wait for it
// (within MaxWait, ctx's deadline and MaxWaiting) is Allowed, with Waited
// the wait it would take.
//
// identity is what the policy keys requests by: with a KeyFunc, a value it
// returns (or an identity given to Consume), as it is; without one, a
// client address in any spelling ("192.0.2.1", "[2001:db8::1]:443",
// "::ffff:192.0.2.1", with a zone, or a prefix no wider than the grouping,
// "2001:db8::/64"), grouped as requests are (IPv6 /64 by default, so
// 2001:db8::1 and 2001:db8::ff are one identity), and any text that is not
// an address the identity given to Consume (a policy without KeyFunc whose
// Consume identities can spell addresses needs a KeyFunc, any, for Peek
// and Reset to read them as they are). Decision.Identity returns the
// identity in this spelling. The plan is the one Policy.Plan names for a
// Request whose Native is identity (as for Consume), without reporting a
// fallback: a Plan over an adapter's request type (PlanFunc, PlanFuncOf)
// cannot read an identity, so Peek answers for the default plan there.
//
// (With a KeyFunc, the requests it left to the client address cannot be
// named: their identity is read as a KeyFunc value.)
//
// The error wraps ErrInvalidIdentity for an identity the policy never keys
// a request by (blank; text made only of address characters, one of
// ".:[]/%" among them, that is no address; the unspecified address; a
// prefix wider than the grouping), errors.ErrUnsupported for a PerRoute policy without a Name (one bucket
// per route) or a store that is not a limitstore.Resetter, or is the
// store's failure: no FailureMode applies, and a store protected by a
// guard (the Redis store) answers within its store timeout.
func (l *Limiter) Peek(ctx context.Context, identity string) (Decision, error) {
	id, _, err := l.adminTarget(identity)
	if err != nil {
		return Decision{}, err
	}
	pl := l.quietPlan(identity)
	set := &pl.sets[0]
	sc := l.scratch.Get().(*scratch)
	defer l.scratch.Put(sc)
	op, _, _ := l.op(sc, &l.shared, &id, set, 1)
	op.Peek = true
	start := l.store.start()
	var res limitstore.Result
	err = call(ctx, &l.store.primary, op, &res) // primary.Store is the Resetter
	l.store.timed(l.store.primary.name, "peek", start, err)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Cost: 1, Bucket: l.shared.name, KeySource: id.src, Policy: &l.policy, Plan: pl.label, who: id}
	d.fill(&res)
	d.Limit = set.q[d.quota].limit
	d.charge = charge{}
	if !d.Allowed && !d.OverCapacity && l.maxWaitMS > 0 && (!d.Blocked || d.blockStarted) {
		// Under MaxWait the request would reserve its slot and wait for
		// it, as far as the wait, ctx's deadline and the waiters allow
		// (and then begin no block; a block in force admits no wait).
		wait := l.maxWaitMS
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl).Milliseconds()-1)
		}
		ms := d.RetryAfter.Milliseconds()
		if d.blockStarted {
			ms = quotaRetryMS(&res)
		}
		if ms > 0 && ms <= wait && l.waiting.Load() < l.maxWaiting {
			d.Allowed, d.Outcome, d.Waited, d.RetryAfter = true, OutcomeAllowed, time.Duration(ms)*time.Millisecond, 0
			d.Blocked, d.blockStarted = false, false
		}
	}
	if !d.Allowed && l.policy.Shadow {
		d.Allowed, d.Outcome = true, OutcomeShadowLimited
	}
	return d, nil
}

// Reset forgets identity's usage in every quota of every plan of the
// policy, and its block and offence (Policy.BlockFor; the charges of its
// requests still in flight stay unsettled until their Finish, which
// gives nothing back to the new usage), as one atomic store
// operation (limitstore.Resetter.Reset: the
// identity's keys share one hash tag, so one Redis command on one Cluster
// slot, or one shard lock of the memory store): a request racing it is
// counted wholly before it (and forgotten) or wholly after it. It is
// idempotent. Under FailureMode FailLocal the local store (WithLocalStore)
// forgets the identity too. identity is spelled as for Peek, and the
// errors are Peek's; a local store's failure is joined to the primary's,
// and so is an error wrapping errors.ErrUnsupported when the local store
// cannot forget (it does not implement limitstore.Resetter).
func (l *Limiter) Reset(ctx context.Context, identity string) error {
	id, rs, err := l.adminTarget(identity)
	if err != nil {
		return err
	}
	var keys [][]byte
	var op limitstore.Op
	for i := range l.res.plans {
		set := &l.res.plans[i].sets[0]
		l.keys.appendKeys(nil, &l.shared, &id, set, &op)
		for j := range set.n {
			keys = append(keys, op.Quotas[j].Key)
		}
	}
	keys = l.blockKey(keys, &id)
	start := l.store.start()
	err = reset(ctx, rs, keys)
	l.store.timed(l.store.primary.name, "reset", start, err)
	if local, ok := l.store.local.Store.(limitstore.Resetter); ok {
		start = l.store.start()
		lerr := reset(ctx, local, keys)
		l.store.timed(l.store.local.name, "reset", start, lerr)
		if lerr != nil {
			err = errors.Join(err, fmt.Errorf("limit: the local store (WithLocalStore) failed: %w", lerr))
		}
	} else if l.store.local.Store != nil {
		err = errors.Join(err, fmt.Errorf("limit: the local store (WithLocalStore, %s) does not implement limitstore.Resetter, so it keeps the identity's counts for the next outage: %w",
			l.store.local.name, errors.ErrUnsupported))
	}
	return err
}

// reset calls rs.Reset with a recovered panic, a failure like any other.
func reset(ctx context.Context, rs limitstore.Resetter, keys [][]byte) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limit: store panicked: %v", p)
		}
	}()
	return rs.Reset(ctx, keys)
}

// adminTarget is what Peek and Reset act on: identity as the policy keys
// it, and the store that can look and forget.
func (l *Limiter) adminTarget(identity string) (who, limitstore.Resetter, error) {
	if l.conc != nil {
		return who{}, nil, fmt.Errorf("limit: Peek and Reset act on rate quotas; a Concurrency policy's slots are held by requests in flight and given back by Finish: %w", errors.ErrUnsupported)
	}
	if l.policy.Scope == PerRoute && l.policy.Name == "" {
		return who{}, nil, fmt.Errorf("limit: Peek and Reset act on one bucket, and a PerRoute policy without a Name has one per route: "+
			"give the policy a Name (one bucket for every route it is mounted on): %w", errors.ErrUnsupported)
	}
	id, err := l.identityOf(identity)
	if err != nil {
		return who{}, nil, err
	}
	rs, ok := l.store.primary.Store.(limitstore.Resetter)
	if !ok {
		return who{}, nil, fmt.Errorf("limit: the store (%s) does not implement limitstore.Resetter, which Peek and Reset need: %w", l.store.primary.name, errors.ErrUnsupported)
	}
	return id, rs, nil
}

// identityOf reads identity the way the policy keys requests: with a
// KeyFunc, as it is (an application identity); without one, a client
// address, parsed as a socket peer is (parseAddrText) or as a prefix, and
// grouped as requests are (group), so that the key is the one a request
// from that address writes; and any other text as the identity given to
// Consume. Text made only of address characters, a separator among them,
// that is no address, and a prefix wider than the grouping are errors; so
// is the unspecified address, unless the policy groups its family, where
// it names the group of addresses whose high bits are zero (as
// Decision.Identity spells the group of ::1 under /64: "::").
func (l *Limiter) identityOf(identity string) (who, error) {
	if strings.TrimSpace(identity) == "" {
		return who{}, fmt.Errorf("%w: the identity is blank: no request is keyed by a blank identity (they share the fallback bucket)", ErrInvalidIdentity)
	}
	if l.policy.KeyFunc != nil {
		return who{src: KeySourceKeyFunc, text: identity}, nil
	}
	if a, ok := parseAddrText(identity, false); ok {
		return who{src: KeySourceSocket, addr: l.group(a)}, nil
	}
	if pfx, err := netip.ParsePrefix(identity); err == nil {
		a := pfx.Addr().Unmap()
		bits, span := l.cfg.ipv6Bits, pfx.Bits()
		if a.Is4() {
			bits = l.cfg.ipv4Bits
		}
		if pfx.Addr().Is4In6() {
			span -= 96 // ::ffff:192.0.2.0/120 is 192.0.2.0/24
		}
		switch {
		case span < bits:
			return who{}, fmt.Errorf("%w: %s spans several identities: requests from addresses of its family are grouped by /%d", ErrInvalidIdentity, pfx, bits)
		case a.IsUnspecified() && (span >= a.BitLen() || bits >= a.BitLen()):
			return who{}, fmt.Errorf("%w: %s is the unspecified address, never a client address", ErrInvalidIdentity, a)
		}
		return who{src: KeySourceSocket, addr: l.group(a)}, nil
	}
	// A group of addresses whose high bits are all zero (::1 under /64) is
	// keyed, and named by Decision.Identity, as the unspecified address.
	if a, err := netip.ParseAddr(identity); err == nil && a.Zone() == "" && a.Unmap().IsUnspecified() {
		a = a.Unmap()
		bits := l.cfg.ipv6Bits
		if a.Is4() {
			bits = l.cfg.ipv4Bits
		}
		if bits < a.BitLen() {
			return who{src: KeySourceSocket, addr: a}, nil
		}
	}
	if strings.Trim(identity, "0123456789abcdefABCDEF.:[]/%") == "" && strings.ContainsAny(identity, ".:[]/%") {
		return who{}, fmt.Errorf("%w: %q is spelled like a client address but is none (nor a prefix); the unspecified addresses 0.0.0.0 and :: are never one", ErrInvalidIdentity, sanitize(identity))
	}
	return who{src: KeySourceConsume, text: identity}, nil
}

// quietPlan is the plan Policy.Plan names for identity (a Request whose
// Native is identity, as for Consume); anything else is the default plan,
// not reported: Peek is a look, not a request.
func (l *Limiter) quietPlan(identity string) *plan {
	if l.policy.Plan == nil {
		return &l.res.plans[0]
	}
	r := Request{Native: identity} // no lim: a typed Plan's mismatch is not reported
	name, p, err := l.callPlan(&r)
	if p == nil && err == nil {
		if pl, ok := l.plans[name]; ok {
			return pl
		}
	}
	return &l.res.plans[0]
}
