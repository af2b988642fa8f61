package limit

import (
	"strings"
	"sync"
	"sync/atomic"
)

// bucket returns the bucket of a request: the policy Name, or the Shared
// signature, or for PerRoute the normalised route template plus the signature
// ("/v1/notes/{id} 100p60"). A request no route matches (Request.Unmatched)
// draws on the Shared bucket; a PerRoute request whose route the mount cannot
// see falls back to Shared too and reports Issue "route-unknown".
func (l *Limiter) bucket(r *Request) bucketRef {
	if l.policy.Name != "" || l.policy.Scope != PerRoute || r.Unmatched {
		return l.shared
	}
	if r.Route == "" {
		l.cfg.rep.issue(l.shared.name, issueRouteUnknown)
		return l.shared
	}
	return l.routes.bucket(r.Route, l.res.signature)
}

// BucketsByRoute reports whether l's bucket is the request's route: Scope
// PerRoute without a Name. Only then does the bucket read Request.Route, so
// an adapter whose router can tell the route only at a cost (fiber in a Use
// mount, before it has matched a route) looks it up only for such a
// Limiter; for any other Limiter the route changes no bucket, and the
// Observer's handler label and the policy functions see what the adapter
// knows for free. The answer is fixed when l is made.
func (l *Limiter) BucketsByRoute() bool {
	return l.policy.Scope == PerRoute && l.policy.Name == ""
}

// bucketRef is a bucket name with its FNV-1a hash, computed once per bucket
// (the store key's hash tag mixes it with the identity's hash).
type bucketRef struct {
	name string
	hash uint64
}

func newBucketRef(name string) bucketRef {
	return bucketRef{name, fnvAddString(fnvOffset, name)}
}

// maxCachedRoutes bounds the route cache. Templates come from the router's
// configuration, never from the request path, so a real application has far
// fewer; past the bound buckets are still correct, only computed per call.
const maxCachedRoutes = 4096

// routeCache maps raw route templates to PerRoute bucket names. Reads are
// lock-free (an immutable map behind an atomic pointer); a miss copies the map
// under a mutex. Lookups with a string key do not allocate.
type routeCache struct {
	m  atomic.Pointer[map[string]bucketRef]
	mu sync.Mutex
}

func (c *routeCache) bucket(route, sig string) bucketRef {
	if m := c.m.Load(); m != nil {
		if b, ok := (*m)[route]; ok {
			return b
		}
	}
	b := newBucketRef(NormalizeRoute(route) + " " + sig)
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 0
	if old != nil {
		n = len(*old)
	}
	if n >= maxCachedRoutes {
		return b
	}
	next := make(map[string]bucketRef, n+1)
	if old != nil {
		for k, v := range *old {
			next[k] = v
		}
	}
	next[strings.Clone(route)] = b
	c.m.Store(&next)
	return b
}

// NormalizeRoute rewrites a router's route template into quotagate's bucket
// spelling, so that one route has one bucket name whatever the router:
//   - a net/http method and host prefix is dropped ("GET example.com/a" -> "/a");
//   - ":name" (echo, gin, fiber) becomes "{name}", fiber's optional mark and
//     constraints dropped (":id?", ":id<int>" -> "{id}");
//   - "{name:regexp}" (chi) and "{name...}" (net/http) become "{name}";
//   - "*name" (gin catch-all) becomes "{name}"; a bare "*" stays;
//   - net/http's end anchor "{$}" is dropped, its slash kept ("/a/{$}" -> "/a/").
//
// It is pure and safe for concurrent use.
func NormalizeRoute(route string) string {
	if i := strings.IndexByte(route, ' '); i >= 0 {
		route = strings.TrimLeft(route[i+1:], " ")
	}
	if route != "" && route[0] != '/' {
		if i := strings.IndexByte(route, '/'); i >= 0 {
			route = route[i:]
		} else {
			route = "/"
		}
	}
	if !strings.ContainsAny(route, ":{*") {
		return route
	}
	segs := strings.Split(route, "/")
	for i, seg := range segs {
		segs[i] = normalizeSegment(seg)
	}
	// Only the anchor goes: "/a/{$}" matches "/a/" exactly, a route apart
	// from "/a".
	out := strings.TrimSuffix(strings.Join(segs, "/"), "{$}")
	if out == "" {
		out = "/"
	}
	return out
}

func normalizeSegment(seg string) string {
	switch {
	case strings.HasPrefix(seg, ":") && len(seg) > 1:
		name := seg[1:]
		if i := strings.IndexByte(name, '<'); i > 0 {
			name = name[:i]
		}
		if n := strings.TrimSuffix(name, "?"); n != "" {
			name = n
		}
		return "{" + name + "}"
	case strings.HasPrefix(seg, "*") && len(seg) > 1:
		return "{" + seg[1:] + "}"
	case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
		name := seg[1 : len(seg)-1]
		if i := strings.IndexByte(name, ':'); i >= 0 {
			name = name[:i]
		}
		name = strings.TrimSuffix(name, "...")
		return "{" + name + "}"
	}
	return seg
}
