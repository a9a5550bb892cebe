// Package option lets libraries name the options of corgifs without
// knowing how a caller spells them. A message names an option as
// {name}, such as "raise {max-memory}"; the CLI renders it as its flag,
// --max-memory, with Render, and another caller as it sets that option.
// Placeholders survive wrapping with fmt.Errorf as plain text, so the CLI
// renders the whole final message once.
package option

import (
	"errors"
	"fmt"
	"strings"
)

// Render writes every placeholder {name} in s as prefix+name. A
// placeholder's name is lowercase letters, digits and dashes, starting
// with a letter, and its brace does not follow a letter, digit or one of
// "_./-": other braces, such as JSON, an empty {} or a brace inside a
// path or a word (a file data{a}.bin), are left as they are.
func Render(s, prefix string) string {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i >= 0 {
		n := placeholder(s, i)
		if n == 0 {
			b.WriteString(s[:i+1])
			s = s[i+1:]
		} else {
			b.WriteString(s[:i])
			b.WriteString(prefix)
			b.WriteString(s[i+1 : i+1+n])
			s = s[i+2+n:]
		}
		i = strings.IndexByte(s, '{')
	}
	b.WriteString(s)
	return b.String()
}

// placeholder returns the length of the name of the placeholder whose
// brace is s[i], or 0 if s[i] does not open one.
func placeholder(s string, i int) int {
	if i > 0 && inWord(s[i-1]) {
		return 0
	}
	n := 0
	for j := i + 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '}':
			return n
		case c >= 'a' && c <= 'z', n > 0 && (c >= '0' && c <= '9' || c == '-'):
			n++
		default:
			return 0
		}
	}
	return 0
}

func inWord(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("_./-", c) >= 0
}

// Error is an option that cannot work. Its Reason names options as
// placeholders, {strategy}: Error returns it so, for a caller to render
// once (Render), and Text renders it.
type Error struct {
	// Option is the option at fault, without dashes.
	Option string
	Reason string
	// Err is the cause, if any, already said in Reason.
	Err error
}

func (e *Error) Error() string { return e.Reason }
func (e *Error) Unwrap() error { return e.Err }

// Text is the reason with every {name} written as prefix+name, such as
// --strategy.
func (e *Error) Text(prefix string) string { return Render(e.Reason, prefix) }

// Errorf returns an *Error about option whose Reason is formatted as by
// fmt.Errorf; an operand of %w becomes its Err.
func Errorf(option, format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	e := &Error{Option: option, Reason: err.Error()}
	switch w := err.(type) {
	case interface{ Unwrap() error }:
		e.Err = w.Unwrap()
	case interface{ Unwrap() []error }:
		e.Err = errors.Join(w.Unwrap()...)
	}
	return e
}
