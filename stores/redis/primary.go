package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// connSet keeps the open connections of a client the Store dialled itself
// (Dial, NewFromURL), so that the Store can close them when the server
// behind them is no longer a usable primary: rueidis then dials again on
// the next call, and an address that was repointed to the new primary
// (a DNS name, a Kubernetes Service, a provider's primary endpoint after a
// failover) reaches it. Without that the old primary, now a replica, keeps
// the connections and answers every script call READONLY for ever.
type connSet struct {
	mu sync.Mutex
	m  map[*trackedConn]struct{}
}

// wrap returns a dial function that dials with inner (plainDial when nil)
// and keeps every connection it returns until that connection is closed.
func (cs *connSet) wrap(inner dialFunc) dialFunc {
	if inner == nil {
		inner = plainDial
	}
	return func(ctx context.Context, dst string, d *net.Dialer, cfg *tls.Config) (net.Conn, error) {
		c, err := inner(ctx, dst, d, cfg)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, set: cs}
		cs.mu.Lock()
		if cs.m == nil {
			cs.m = map[*trackedConn]struct{}{}
		}
		cs.m[tc] = struct{}{}
		cs.mu.Unlock()
		return tc, nil
	}
}

// closeAll closes every open connection and returns how many it closed.
func (cs *connSet) closeAll() int {
	cs.mu.Lock()
	conns := make([]*trackedConn, 0, len(cs.m))
	for c := range cs.m {
		conns = append(conns, c)
	}
	cs.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}

// trackedConn leaves its connSet when it is closed.
type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// notPrimary reacts to a failed script call whose error says the server is
// not a usable primary (READONLY: a replica, typically a demoted primary
// after a failover; MASTERDOWN: a replica that lost its primary): at most
// once per ReconnectInterval it closes the connections of a client the
// Store dialled itself, so that the next calls dial again, and logs it (at
// most once per 10 s). On a client of the caller's (New) it can only log.
func (s *Store) notPrimary(err error) {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return
	}
	msg := re.Error()
	if !strings.HasPrefix(msg, "READONLY") && !strings.HasPrefix(msg, "MASTERDOWN") {
		return
	}
	now := time.Now().UnixNano()
	last := s.notPrimaryAt.Load()
	if now-last < int64(ReconnectInterval) || !s.notPrimaryAt.CompareAndSwap(last, now) {
		return
	}
	word, _, _ := strings.Cut(msg, " ")
	logIt := now-s.notPrimaryLogged.Load() >= int64(10*time.Second)
	if logIt {
		s.notPrimaryLogged.Store(now)
	}
	if s.conns == nil {
		if logIt {
			s.logger.Error("quotagate: Redis answered "+word+": the client's connections are to a server that is not a usable primary, and the Store cannot redial a client it was given (New); "+
				"build it with Dial or NewFromURL, or close the client's connections", slog.String("error", msg))
		}
		return
	}
	n := s.conns.closeAll()
	if logIt {
		s.logger.Warn("quotagate: Redis answered "+word+": the server behind the Store's connections is not a usable primary (a failover?); closed them to dial again",
			slog.Int("connections", n), slog.String("error", msg))
	}
}
