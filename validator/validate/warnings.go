package validate

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/corgifs/corgifs/option"
)

// warnings keeps the warnings an in-process run logged, as a child
// mount's log has them: each its message and attributes, without time
// and level, options written as the flags of corgifs mount.
type warnings struct {
	mu    sync.Mutex
	buf   bytes.Buffer // the line being formatted
	lines []string
}

// logger returns a logger that logs to next and keeps what it logs at
// warning level or above.
func (w *warnings) logger(next *slog.Logger) *slog.Logger {
	text := slog.NewTextHandler(&w.buf, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey) {
			return slog.Attr{}
		}
		return a
	}})
	return slog.New(&warningHandler{next: next.Handler(), text: text, w: w})
}

// all returns the warnings kept so far.
func (w *warnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

type warningHandler struct {
	next, text slog.Handler
	w          *warnings
}

func (h *warningHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || h.next.Enabled(ctx, l)
}

func (h *warningHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w := h.w
		w.mu.Lock()
		w.buf.Reset()
		if err := h.text.Handle(ctx, r); err == nil {
			w.lines = append(w.lines, option.Render(strings.TrimSuffix(w.buf.String(), "\n"), "--"))
		}
		w.mu.Unlock()
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *warningHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &warningHandler{next: h.next.WithAttrs(as), text: h.text.WithAttrs(as), w: h.w}
}

func (h *warningHandler) WithGroup(name string) slog.Handler {
	return &warningHandler{next: h.next.WithGroup(name), text: h.text.WithGroup(name), w: h.w}
}
