package main

import (
	"errors"
	"flag"

	"github.com/corgifs/corgifs/mount"
)

// optionValue is the flag of an option of mount.Options: it parses into a
// mount.Config.
type optionValue struct {
	o *mount.Option
	c *mount.Config
	// refused is where a value the Config refuses as a whole (an
	// *OptionError, such as a seed that is no number) is kept, to be said
	// after parsing as the CLI always said it, rather than as a malformed
	// flag with the whole usage.
	refused *error
}

func (v optionValue) String() string {
	if v.o == nil { // the zero value package flag makes
		return ""
	}
	return v.o.Value(v.c)
}

func (v optionValue) Set(s string) error {
	err := v.o.Set(v.c, s)
	var oe *mount.OptionError
	if errors.As(err, &oe) {
		if *v.refused == nil {
			*v.refused = err
		}
		return nil
	}
	return err
}

func (v optionValue) IsBoolFlag() bool { return v.o != nil && v.o.Kind == mount.KindBool }

// registerOptions adds to fset a flag for every option of mount.Options
// that cmd takes, parsing into c; a refused value is kept in *refused.
func registerOptions(fset *flag.FlagSet, cmd mount.Command, c *mount.Config, refused *error) {
	opts := mount.Options()
	for i := range opts {
		o := &opts[i]
		if !o.For(cmd) {
			continue
		}
		help, def := o.Usage(cmd)
		fset.Var(optionValue{o: o, c: c, refused: refused}, o.Name, help)
		fset.Lookup(o.Name).DefValue = def
	}
}

// optionArgs are the flags that give a child process the options names
// with their values in c.
func optionArgs(c *mount.Config, names ...string) []string {
	var a []string
	for _, n := range names {
		o, ok := mount.LookupOption(n)
		if !ok {
			panic("no option " + n)
		}
		a = append(a, "--"+n+"="+o.Value(c))
	}
	return a
}

// printDefaults writes the usage of every flag of fset as
// flag.PrintDefaults does; an option of mount.Options is written as a
// flag of its Kind (a string's default quoted, "int", "duration"), as the
// flags that held the options always were.
func printDefaults(fset *flag.FlagSet) {
	fset.VisitAll(func(f *flag.Flag) {
		one := flag.NewFlagSet("", flag.ContinueOnError)
		one.SetOutput(fset.Output())
		v, ok := f.Value.(optionValue)
		switch {
		case !ok:
			one.Var(f.Value, f.Name, f.Usage)
		case v.o.Kind == mount.KindString:
			one.String(f.Name, "", f.Usage)
		case v.o.Kind == mount.KindBool:
			one.Bool(f.Name, false, f.Usage)
			if f.DefValue == "" { // its help says the default
				f = &flag.Flag{Name: f.Name, Usage: f.Usage, DefValue: "false"}
			}
		case v.o.Kind == mount.KindInt:
			one.Int(f.Name, 0, f.Usage)
		case v.o.Kind == mount.KindDuration:
			one.Duration(f.Name, 0, f.Usage)
		default:
			one.Var(optionValue{}, f.Name, f.Usage)
		}
		one.Lookup(f.Name).DefValue = f.DefValue
		one.PrintDefaults()
	})
}
