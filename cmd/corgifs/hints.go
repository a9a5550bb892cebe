package main

import (
	"context"
	"log/slog"

	"github.com/corgifs/corgifs/option"
)

// The libraries name options as placeholders, {max-memory}
// (package option); the CLI is what knows them as flags, so every
// message it prints or logs passes through here once.

// flagText is the message of err with every {option} written as its
// flag, --option.
func flagText(err error) string { return option.Render(err.Error(), "--") }

// flagHandler is a slog.Handler that writes the options that messages and
// string attributes name as flags, {max-memory} as --max-memory, before h
// writes the record.
type flagHandler struct{ h slog.Handler }

func (f flagHandler) Enabled(ctx context.Context, l slog.Level) bool { return f.h.Enabled(ctx, l) }

func (f flagHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, option.Render(r.Message, "--"), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(flagAttr(a))
		return true
	})
	return f.h.Handle(ctx, out)
}

func (f flagHandler) WithAttrs(as []slog.Attr) slog.Handler {
	rs := make([]slog.Attr, len(as))
	for i, a := range as {
		rs[i] = flagAttr(a)
	}
	return flagHandler{f.h.WithAttrs(rs)}
}

func (f flagHandler) WithGroup(name string) slog.Handler { return flagHandler{f.h.WithGroup(name)} }

// flagAttr renders the placeholders of a string attribute, an error's
// message and the attributes of a group.
func flagAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, option.Render(v.String(), "--"))
	case slog.KindGroup:
		g := v.Group()
		rs := make([]slog.Attr, len(g))
		for i, x := range g {
			rs[i] = flagAttr(x)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(rs...)}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, flagText(err))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
