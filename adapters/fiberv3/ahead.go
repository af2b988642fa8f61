package fiberlimit

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gofiber/fiber/v3"
)

// ahead finds, for a Use mount, the route fiber will serve the request with:
// the first route (not a Use mount) after the mount in the stack of the
// request's method, in fiber's registration order (automatic HEAD routes
// last, as fiber appends them), whose pattern matches the request's path
// the way fiber matches it. A New handler has one when its Limiter's bucket
// is the route (limit.Limiter.BucketsByRoute), and asks it only in a Use
// mount before fiber has matched a route.
//
// The per-method route lists are built once from app.Stack() and rebuilt
// only when that stack changes (a route added, removed or moved: each
// request compares the stack's route pointers with the list's, a pointer
// comparison per route and no allocation: App.RemoveRoute is seen too).
// Nothing is kept per request path. Safe for concurrent use.
type ahead struct {
	mu   sync.Mutex                   // serialises building
	apps atomic.Pointer[[]*appRoutes] // one per app the handler ran in (usually one); copied on write
}

// appRoutes are the route lists of one app, one per request method.
type appRoutes struct {
	app     *fiber.App
	methods []string     // Config.RequestMethods: the index of a method is its stack's
	match   fiber.Config // CaseSensitive and StrictRouting, for fiber.RoutePatternMatch
	stacks  []atomic.Pointer[methodRoutes]
}

// methodRoutes is one method's stack as the handler last saw it, with what
// each route needs for matching.
type methodRoutes struct {
	stack  []*fiber.Route // the stack's route pointers, compared with app.Stack() per request
	at     map[*fiber.Route]int
	routes []pattern // routes[i] is stack[i]'s
}

// pattern is a route's registered path, prepared the way fiber's register
// prepares it (lower case unless CaseSensitive, no trailing slash unless
// StrictRouting), so that most routes are ruled out by a string comparison
// and only a plausible one is asked of fiber.RoutePatternMatch.
type pattern struct {
	path  string // the registered path: the route template the engine gets
	skip  bool   // a Use mount, a mounted app's placeholder, or a route without handlers
	tree  string // fiber's tree key: the first 3 bytes of the leading constant, "" when shorter
	head  string // the leading constant (up to the first parameter or escape), without a trailing slash fiber makes optional
	exact string // for a route without parameters: the one detection path it matches
	plain bool   // no parameter, wildcard or escape: exact decides
	star  bool   // "/*": every path
}

// find returns the template of the route fiber will serve c with after the
// Use mount c is running in, with unmatched false; or "" and true when no
// route after the mount matches (fiber answers 404 or 405 unless a later Use
// handler answers); or "" and false when the route cannot be told (c's
// route is not in its method's stack, or the path is empty once trimmed).
func (a *ahead) find(c fiber.Ctx) (template string, unmatched bool) {
	app := c.App()
	ar := a.tables(app)
	m := slices.Index(ar.methods, c.Method())
	if m < 0 || m >= len(ar.stacks) {
		return "", false
	}
	stacks := app.Stack()
	if m >= len(stacks) {
		return "", false
	}
	mr := ar.stacks[m].Load()
	if mr == nil || !slices.Equal(mr.stack, stacks[m]) {
		mr = a.build(ar, m, stacks[m])
	}
	i, ok := mr.at[c.Route()]
	if !ok {
		return "", false
	}
	path := detection(c.Path(), ar.match.StrictRouting)
	if path == "" {
		return "", false
	}
	for j := i + 1; j < len(mr.routes); j++ {
		if p := &mr.routes[j]; p.matches(path, &ar.match) {
			return p.path, false
		}
	}
	return "", true
}

// detection is the path fiber routes on, but for the letter case (folded
// by the comparisons instead): c.Path() (unescaped with
// Config.UnescapePath) without its trailing slashes unless strict.
func detection(path string, strict bool) string {
	if !strict && len(path) > 1 && path[len(path)-1] == '/' {
		return strings.TrimRight(path, "/")
	}
	return path
}

// matches reports whether fiber routes path (the detection path: trailing
// slashes trimmed unless StrictRouting) to p. A route without parameters
// matches one path, compared here as fiber compares it; any other is asked
// of fiber.RoutePatternMatch (which parses the pattern: an allocation or a
// few) once plausible has let it through.
func (p *pattern) matches(path string, cfg *fiber.Config) bool {
	fold := !cfg.CaseSensitive
	if p.skip || !p.plausible(path, fold) {
		return false
	}
	if p.plain {
		return p.star || equal(path, p.exact, fold)
	}
	return fiber.RoutePatternMatch(path, p.path, *cfg)
}

// plausible reports whether fiber could match path (the detection path:
// trailing slashes trimmed unless StrictRouting) against p: it is in p's
// tree (fiber routes a path only against the routes of its first 3 bytes'
// tree and the global one) and it starts with p's leading constant.
func (p *pattern) plausible(path string, fold bool) bool {
	if p.tree != "" && (len(path) < len(p.tree) || !equal(path[:len(p.tree)], p.tree, fold)) {
		return false
	}
	return len(path) >= len(p.head) && equal(path[:len(p.head)], p.head, fold)
}

// tables returns the route lists of app, adding empty ones the first time.
func (a *ahead) tables(app *fiber.App) *appRoutes {
	if apps := a.apps.Load(); apps != nil {
		for _, ar := range *apps {
			if ar.app == app {
				return ar
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var apps []*appRoutes
	if p := a.apps.Load(); p != nil {
		apps = *p
	}
	for _, ar := range apps {
		if ar.app == app {
			return ar
		}
	}
	cfg := app.Config()
	ar := &appRoutes{app: app, methods: cfg.RequestMethods,
		match:  fiber.Config{CaseSensitive: cfg.CaseSensitive, StrictRouting: cfg.StrictRouting},
		stacks: make([]atomic.Pointer[methodRoutes], len(cfg.RequestMethods))}
	apps = append(slices.Clip(apps), ar)
	a.apps.Store(&apps)
	return ar
}

// build makes the route list of method m from stack, unless another
// request has just made it.
func (a *ahead) build(ar *appRoutes, m int, stack []*fiber.Route) *methodRoutes {
	a.mu.Lock()
	defer a.mu.Unlock()
	if mr := ar.stacks[m].Load(); mr != nil && slices.Equal(mr.stack, stack) {
		return mr
	}
	// fiber.Route marks Use mounts with an unexported field; App.GetRoutes(true)
	// lists every route but them, and a listed route shares its Handlers'
	// backing array with the stack's (a copy of the Route, not of its
	// handlers). An automatic HEAD route is a copy of its GET route: it
	// shares the array too, and is listed under HEAD.
	routes := make(map[routeID]bool)
	for _, r := range ar.app.GetRoutes(true) {
		if len(r.Handlers) > 0 {
			routes[routeID{&r.Handlers[0], r.Path}] = true
		}
	}
	mr := &methodRoutes{stack: slices.Clone(stack), at: make(map[*fiber.Route]int, len(stack)), routes: make([]pattern, len(stack))}
	for i, r := range stack {
		mr.at[r] = i
		if len(r.Handlers) == 0 || !routes[routeID{&r.Handlers[0], r.Path}] {
			mr.routes[i] = pattern{path: r.Path, skip: true}
			continue
		}
		mr.routes[i] = prepare(r.Path, &ar.match)
	}
	ar.stacks[m].Store(mr)
	return mr
}

// routeID tells a route from a Use mount of the same path: its first
// handler's address.
type routeID struct {
	h    *fiber.Handler
	path string
}

// prepare returns the pattern of a route registered as path, prettified as
// fiber's register does: "/" in front, lower case unless CaseSensitive,
// trailing slashes trimmed unless StrictRouting.
func prepare(path string, cfg *fiber.Config) pattern {
	pretty := path
	if pretty == "" || pretty[0] != '/' {
		pretty = "/" + pretty
	}
	if !cfg.CaseSensitive {
		pretty = lower(pretty)
	}
	if !cfg.StrictRouting && len(pretty) > 1 {
		pretty = strings.TrimRight(pretty, "/")
	}
	p := pattern{path: path}
	if pretty == "/*" {
		p.plain, p.star = true, true // fiber's star route: every path, in the global tree
		return p
	}
	end := strings.IndexAny(pretty, ":+*\\") // where fiber's parameters (and escapes) can begin
	if end < 0 {
		p.plain, p.exact, p.head = true, pretty, pretty
	} else {
		p.head = pretty[:end]
	}
	if len(p.head) >= 3 {
		p.tree = p.head[:3]
	}
	if len(p.head) > 1 && (p.plain || optional(pretty[end:])) {
		p.head = strings.TrimSuffix(p.head, "/") // fiber's optional slash
	}
	return p
}

// optional reports whether the part of a pattern from its first parameter
// on may make the slash before it optional: fiber makes a constant's
// trailing slash optional before an optional parameter, which is a wildcard
// or a parameter marked '?'. Any '?' after the parameter's start counts
// (it may be a later parameter's: the head is then only shorter).
func optional(rest string) bool {
	return rest[0] == '*' || (rest[0] != '\\' && strings.IndexByte(rest, '?') >= 0)
}

// lower is fiber's lower case for routing: ASCII letters only.
func lower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// equal compares a path with a prepared (lower case when fold) pattern
// string, folding ASCII letters of the path when fold, as fiber's lower case
// detection path does.
func equal(path, s string, fold bool) bool {
	if len(path) != len(s) {
		return false
	}
	if !fold {
		return path == s
	}
	for i := 0; i < len(path); i++ {
		c := path[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
