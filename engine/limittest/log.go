package limittest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
)

// Log collects the lines of a slog text logger, for tests that count log
// lines. The zero value is ready to use; it is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p; it implements io.Writer for slog.NewTextHandler.
func (l *Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Count returns how many times substr occurs in what was logged.
func (l *Log) Count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), substr)
}

// String returns everything logged.
func (l *Log) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Logger returns a text logger writing into l.
func (l *Log) Logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }
