package mount

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/corgifs/corgifs/api"
)

// sampleValues are a value other than the default of every option, which
// the tests set to see what each option changes.
var sampleValues = map[string]string{
	"block-size": "64KiB", "include": "*.csv,*.tsv", "follow-symlinks": "true",
	"cache-dir": "/var/tmp/corgi", "s3-endpoint": "http://127.0.0.1:9000", "s3-region": "eu-west-1",
	"s3-path-style": "true", "s3-concurrency": "7", "s3-timeout": "5s", "index": "probe",
	"skip-corrupt": "true", "compression": "gzip", "direct-io": "false", "strategy": "pls",
	"buffer": "5%", "seed": "42", "max-memory": "2GiB", "partition": "contiguous",
	"exchange": "0.5", "feedback-dim": "16", "balance-rule": "randomized", "feedback-timeout": "5s",
	"equal-parts": "true", "parts": "4", "prefetch": "0", "coordinate": "/shared/run",
	"coordinate-rank": "2", "epochs": "3", "allow-other": "true", "feedback-group": "train",
	"disk-cache": "/var/cache/corgi-blocks", "disk-cache-size": "20GiB",
	"format": "csv", "header": "false", "check": "true", "record-size": "16", "header-bytes": "128",
}

// notOptions are the fields of Config that no option sets: the source
// (an argument), what a command sets for itself, the records' format as
// a value (the options give its name), the S3 client's retry
// and split settings (for tests and benchmarks, their zero is the
// default) and the hooks.
var notOptions = map[string]bool{
	"Source": true, "ListsRecords": true, "Format": true,
	"OrdersOnly": true, "S3.Logger": true, "S3.Attempts": true, "S3.SplitSize": true,
	"Progress": true, "PanicOnLookup": true,
}

// nested are the fields of Config whose own fields are set by options.
var nested = map[string]bool{"S3": true, "FormatOptions": true}

// changedFields are the names of the fields of a and b that differ,
// those of the nested ones as S3.Name.
func changedFields(a, b Config) []string {
	var out []string
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		f := va.Type().Field(i)
		if nested[f.Name] {
			sa, sb := va.Field(i), vb.Field(i)
			for j := range sa.NumField() {
				if !reflect.DeepEqual(sa.Field(j).Interface(), sb.Field(j).Interface()) {
					out = append(out, f.Name+"."+sa.Type().Field(j).Name)
				}
			}
			continue
		}
		if f.Type.Kind() == reflect.Func {
			continue
		}
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, f.Name)
		}
	}
	return out
}

// configFields are the names of Config's fields, those of the nested
// ones as S3.Name.
func configFields() []string {
	var out []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if nested[f.Name] {
			for j := range f.Type.NumField() {
				out = append(out, f.Name+"."+f.Type.Field(j).Name)
			}
			continue
		}
		out = append(out, f.Name)
	}
	return out
}

func TestEveryConfigFieldIsSetByExactlyOneOption(t *testing.T) {
	setBy := map[string]string{}
	names := map[string]bool{}
	for _, o := range Options() {
		if names[o.Name] {
			t.Errorf("option %s is in the table twice", o.Name)
		}
		names[o.Name] = true
		v, ok := sampleValues[o.Name]
		if !ok {
			t.Errorf("option %s has no sample value in this test", o.Name)
			continue
		}
		c := Defaults()
		if err := o.Set(&c, v); err != nil {
			t.Errorf("option %s: Set(%q): %v", o.Name, v, err)
			continue
		}
		changed := changedFields(Defaults(), c)
		if len(changed) == 0 {
			t.Errorf("option %s=%s changes no field of Config", o.Name, v)
		}
		for _, f := range changed {
			if other, dup := setBy[f]; dup {
				t.Errorf("Config.%s is set by two options, %s and %s", f, other, o.Name)
			}
			setBy[f] = o.Name
		}
	}
	for _, f := range configFields() {
		if setBy[f] == "" && !notOptions[f] {
			t.Errorf("Config.%s is set by no option of the table (add one, or list it in notOptions with why)", f)
		}
		if setBy[f] != "" && notOptions[f] {
			t.Errorf("Config.%s is listed in notOptions but option %s sets it", f, setBy[f])
		}
	}
}

func TestAnOptionsValueSetsTheSameConfig(t *testing.T) {
	for _, o := range Options() {
		c := Defaults()
		if err := o.Set(&c, sampleValues[o.Name]); err != nil {
			t.Fatal(err)
		}
		again := Defaults()
		if err := o.Set(&again, o.Value(&c)); err != nil {
			t.Errorf("option %s: Set(Value %q): %v", o.Name, o.Value(&c), err)
			continue
		}
		if d := changedFields(c, again); len(d) > 0 {
			t.Errorf("option %s: setting its value %q back gives a different Config: %v", o.Name, o.Value(&c), d)
		}
	}
}

func TestTheDefaultHelpShowsIsTheDefaultConfig(t *testing.T) {
	def := Defaults()
	for _, o := range Options() {
		cmds := []Command{CmdMount, CmdOrder, CmdIndex, CmdValidate, CmdTune}
		for _, cmd := range cmds {
			if !o.For(cmd) {
				continue
			}
			_, shown := o.Usage(cmd)
			if shown == "" || o.Name == "block-size" && cmd == CmdTune || o.Name == "feedback-dim" && cmd == CmdValidate {
				continue // none shown; tune's and validate's are said by their help
			}
			c := Defaults()
			if err := o.Set(&c, shown); err != nil {
				t.Errorf("option %s: the default %q its help shows does not parse: %v", o.Name, shown, err)
				continue
			}
			if o.Value(&c) != o.Value(&def) {
				t.Errorf("option %s: help shows the default %q, but a Config without it holds %q", o.Name, shown, o.Value(&def))
			}
		}
	}
}

func TestSetRefusesMalformedValues(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"block-size", "lots", "want a size such as 8MiB"},
		{"buffer", "120%", "percentage must be in (0, 100]"},
		{"partition", "striped", "want random or contiguous"},
		{"exchange", "2", "want a fraction Q"},
		{"balance-rule", "greedy", "want deterministic or randomized"},
		{"feedback-timeout", "0s", "want a positive duration"},
		{"prefetch", "-1", "want a number of buffers"},
		{"coordinate-rank", "-1", "want 0 (the order server)"},
		{"disk-cache-size", "150%", "want a percentage in (0, 100]"},
		{"parts", "many", "parse error"},
		{"direct-io", "maybe", "parse error"},
	} {
		o, ok := LookupOption(tc.name)
		if !ok {
			t.Fatalf("no option %s", tc.name)
		}
		c := Defaults()
		if err := o.Set(&c, tc.value); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: error %v, want one containing %q", tc.name, tc.value, err, tc.want)
		}
	}
	// A seed that is no number is refused by the Config, after parsing,
	// as the CLI always said it.
	o, _ := LookupOption("seed")
	c := Defaults()
	err := o.Set(&c, "-3")
	oe, ok := err.(*OptionError)
	if !ok || oe.Text("--") != `--seed "-3": want an unsigned integer` {
		t.Errorf("seed=-3: error %v, want the OptionError --seed \"-3\": want an unsigned integer", err)
	}
}

// jsonKeys are the keys of the JSON encoding of t, nested ones as a.b.
func jsonKeys(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[prefix+name] = true
		jsonKeys(f.Type, prefix+name+".", out)
	}
}

// notInConfigJSON are the options config.json does not record: how the
// source is found, reached and read, and how the mount is shared, change
// where the bytes come from and who reads them, not which records an epoch
// serves in which order (jsonl's --check only checks the records).
var notInConfigJSON = map[string]bool{
	"follow-symlinks": true, "cache-dir": true, "s3-endpoint": true, "s3-region": true,
	"s3-path-style": true, "s3-concurrency": true, "s3-timeout": true, "skip-corrupt": true,
	"compression": true, "direct-io": true, "feedback-dim": true, "coordinate": true,
	"coordinate-rank": true, "allow-other": true, "feedback-group": true, "disk-cache": true,
	"disk-cache-size": true, "check": true,
}

func TestEveryOptionOfTheOrderIsAKeyOfConfigJSON(t *testing.T) {
	keys := map[string]bool{}
	jsonKeys(reflect.TypeFor[api.Config](), "", keys)
	for _, o := range Options() {
		switch {
		case o.ConfigKey == "" && !notInConfigJSON[o.Name]:
			t.Errorf("option %s has no ConfigKey: say which key of config.json records it, or list it in notInConfigJSON with why", o.Name)
		case o.ConfigKey != "" && notInConfigJSON[o.Name]:
			t.Errorf("option %s has ConfigKey %s but is listed in notInConfigJSON", o.Name, o.ConfigKey)
		case o.ConfigKey != "" && !keys[o.ConfigKey]:
			all := make([]string, 0, len(keys))
			for k := range keys {
				all = append(all, k)
			}
			sort.Strings(all)
			t.Errorf("option %s: ConfigKey %s is no key of config.json (api.Config): %s", o.Name, o.ConfigKey, strings.Join(all, " "))
		}
	}
}
