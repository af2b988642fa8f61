package limit

import (
	"context"
	"fmt"
	"github.com/quotagate/quotagate/engine/limitstore"
	"log/slog"
	"strings"
	"time"
)

// config is what Options set. It is shared, read-only, by a Limiter and the
// Limiters derived from it with With.
type config struct {
	keyPrefix       string
	keyPrefixSet    bool // WithKeyPrefix was given (the prefix is chosen, even if it is the default)
	logger          *slog.Logger
	observer        Observer
	hashKeys        bool
	localStore      limitstore.Store
	fallbackDivisor int64
	ipv4Bits        int
	ipv6Bits        int
	trust           trustConfig
	rep             *reporter // built by New from logger and observer
	// The stores with their names, once per New (newStoreCall).
	primary, local storeRef
	now            func() time.Time // WithClock; nil: time.Now
}

// DefaultKeyPrefix is the first segment of every store key when
// WithKeyPrefix is not given.
const DefaultKeyPrefix = "quotagate"

func defaultConfig() *config {
	return &config{
		keyPrefix:       DefaultKeyPrefix,
		logger:          slog.New(slog.DiscardHandler),
		observer:        nopObserver{},
		fallbackDivisor: 10,
		ipv4Bits:        32,
		ipv6Bits:        64,
	}
}

// Option sets a setting of a Limiter that the Limiters derived from it with
// With share. Options are validated by New, which names the option in its
// error.
type Option func(*config) error

// WithKeyPrefix sets the first segment of every store key (default
// "quotagate"): the namespace of a service's records, normally the
// service's name. Services that set one prefix on one store share their
// allowances; distinct prefixes keep them apart. It must be non-blank and
// contain none of ':', '{', '}' (the separator and the Redis Cluster
// hash-tag braces) or whitespace.
//
// On a store shared between processes (limitstore.Info.Shared: the Redis
// store) New requires this option: without it every service on the store
// would draw on one allowance per client. WithKeyPrefix(DefaultKeyPrefix)
// shares the default namespace on purpose.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		if prefix == "" || strings.ContainsAny(prefix, ":{} \t\r\n") {
			return fmt.Errorf("%w: WithKeyPrefix(%q): must be non-empty without ':', '{', '}' or whitespace", ErrInvalidOption, prefix)
		}
		c.keyPrefix, c.keyPrefixSet = prefix, true
		return nil
	}
}

// WithLogger sets the logger for rate-limited operational messages (client
// address issues at most once per 10 minutes per kind, store failures at most
// once per 10 s; never one line per rejection). Default: discard. nil is an
// error.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		c.logger = slog.New(recoveringHandler{l.Handler()})
		return nil
	}
}

// WithObserver sets the receiver of the engine's events (metrics). Default:
// none. nil is an error. A panic inside o is recovered and drops that one
// event; the request is decided as if o had returned.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if o == nil {
			return fmt.Errorf("%w: WithObserver(nil)", ErrInvalidOption)
		}
		c.observer = guardedObserver{o}
		return nil
	}
}

// WithHashKeys makes every identity appear in store keys as the hex SHA-256
// digest of the identity ("h:" keys) instead of the identity itself ("r:"
// keys). Identities over 128 bytes are always hashed.
func WithHashKeys(on bool) Option {
	return func(c *config) error {
		c.hashKeys = on
		return nil
	}
}

// WithLocalStore sets the per-process store that FailLocal policies use while
// the shared store is failing (normally a memstore). New and With refuse a
// FailLocal policy without one, and with one a policy that is not FailLocal
// (its local store would go unused: it would fail open).
func WithLocalStore(s limitstore.Store) Option {
	return func(c *config) error {
		if s == nil {
			return fmt.Errorf("%w: WithLocalStore(nil)", ErrInvalidOption)
		}
		c.localStore = s
		return nil
	}
}

// WithFallbackDivisor sets the divisor of the shared fallback bucket used by
// requests with no identity at all: its limit is max(Cost, Limit/n), never
// below the policy Cost (for a TokenBucket, Burst is divided instead, the
// rate is kept). Default 10; n must be >= 1.
func WithFallbackDivisor(n int64) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithFallbackDivisor(%d): must be >= 1", ErrInvalidOption, n)
		}
		c.fallbackDivisor = n
		return nil
	}
}

// WithAddressPrefixes sets how client addresses are grouped before keying:
// IPv4 addresses by their first v4 bits (1..32, default 32: one address
// each) and IPv6 addresses by their first v6 bits (1..128, default 64: one
// subnet each, so that a client cannot escape its limit by rotating
// addresses inside its /64).
func WithAddressPrefixes(v4, v6 int) Option {
	return func(c *config) error {
		if v4 < 1 || v4 > 32 {
			return fmt.Errorf("%w: WithAddressPrefixes: IPv4 prefix %d is outside 1..32", ErrInvalidOption, v4)
		}
		if v6 < 1 || v6 > 128 {
			return fmt.Errorf("%w: WithAddressPrefixes: IPv6 prefix %d is outside 1..128", ErrInvalidOption, v6)
		}
		c.ipv4Bits, c.ipv6Bits = v4, v6
		return nil
	}
}

// recoveringHandler wraps the caller's slog.Handler so that a handler that
// panics (a broken sink) loses its log line, never the request.
type recoveringHandler struct{ h slog.Handler }

func (r recoveringHandler) Enabled(ctx context.Context, l slog.Level) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	return r.h.Enabled(ctx, l)
}

func (r recoveringHandler) Handle(ctx context.Context, rec slog.Record) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limit: log handler panicked: %v", p)
		}
	}()
	return r.h.Handle(ctx, rec)
}

func (r recoveringHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recoveringHandler{r.h.WithAttrs(as)}
}

func (r recoveringHandler) WithGroup(name string) slog.Handler {
	return recoveringHandler{r.h.WithGroup(name)}
}
