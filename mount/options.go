package mount

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corgifs/corgifs/blockcache"
	"github.com/corgifs/corgifs/formats"
	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/index"
	hint "github.com/corgifs/corgifs/option"
	"github.com/corgifs/corgifs/shuffler"
	"github.com/dustin/go-humanize"
)

// The options of a mount are declared once, in Options: each is the name
// of a flag of the corgifs commands that take it (and of an -o option of
// the mount helper), its help and the default --help shows, and the
// setter that parses its value into a Config. The CLI generates its flags
// and their help from this table, and the mount helper checks its -o
// names against it; a test checks the table against Config, the help
// and config.json.
//
// Not in the table, and registered by hand in cmd/corgifs, are the flags
// that do not land in a Config: --debug, mount's --nonempty,
// --cpuprofile, --background and --log-file (how the process runs, not
// what it serves); and the flags of one command that are no mount
// option: order's --epoch, --part and --output, validate's --strategies,
// --epochs, --workers, its training flags and its own --format and
// decoding flags, tune's probe and analysis flags (and its --seed, of the
// probe), demo's and gen's.

// Command is a set of the corgifs commands that take an option.
type Command uint8

const (
	CmdMount Command = 1 << iota
	CmdOrder
	CmdIndex
	CmdValidate
	CmdTune

	// cmdIndexing are the commands that index a source; cmdOrdering
	// those that order it too.
	cmdIndexing = CmdMount | CmdOrder | CmdIndex | CmdValidate | CmdTune
	cmdOrdering = CmdMount | CmdOrder | CmdValidate
	// cmdFormat take the records' format (validate has flags of its own
	// that say how it decodes them).
	cmdFormat = CmdMount | CmdOrder | CmdIndex
)

// Kind is the type of an option's value, as --help names it when its
// help has no `word` for it: a string's default is quoted, a boolean
// takes no value.
type Kind uint8

const (
	KindValue Kind = iota // "value"
	KindString
	KindBool
	KindInt
	KindDuration
)

// Option is one option of a mount.
type Option struct {
	// Name is the flag's name, without dashes.
	Name string
	// Help is the flag's usage: a `word` in backquotes names its value.
	Help string
	// Default is the default --help shows, "" for none (a zero of Kind,
	// such as false or 0, is not shown either).
	Default string
	Kind    Kind
	// Commands take the option.
	Commands Command
	// ConfigKey is the key of .corgifs/config.json that records the
	// option's value (a dot between nested keys), "" if none does: the
	// options of how the source is reached and cached do not change what
	// is served.
	ConfigKey string

	// variants are the help and default of commands where the option
	// means something narrower (index's --max-memory).
	variants []variant
	set      func(*Config, string) error
	get      func(*Config) string
}

type variant struct {
	cmds      Command
	help, def string
}

// For reports whether cmd takes the option.
func (o *Option) For(cmd Command) bool { return o.Commands&cmd != 0 }

// Usage is the help and the shown default of the option in command cmd.
func (o *Option) Usage(cmd Command) (help, def string) {
	for _, v := range o.variants {
		if v.cmds&cmd != 0 {
			return v.help, v.def
		}
	}
	return o.Help, o.Default
}

// Set parses v into c. A malformed value is a plain error, in the words
// of a flag parser ("want a size such as 8MiB"); a value the Config
// refuses as a whole is an *OptionError.
func (o *Option) Set(c *Config, v string) error { return o.set(c, v) }

// Value is the option's value in c as a flag value that Set takes back.
func (o *Option) Value(c *Config) string { return o.get(c) }

// LookupOption returns the option named name.
func LookupOption(name string) (Option, bool) {
	for _, o := range Options() {
		if o.Name == name {
			return o, true
		}
	}
	return Option{}, false
}

// The errors of malformed values of the plain kinds are those of package
// flag, whose messages the CLI has always given.
var (
	errParse = errors.New("parse error")
	errRange = errors.New("value out of range")
)

func parseBool(v string) (bool, error) {
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, errParse
	}
	return b, nil
}

func parseInt(v string) (int, error) {
	n, err := strconv.ParseInt(v, 0, strconv.IntSize)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, errRange
		}
		return 0, errParse
	}
	return int(n), nil
}

func parseDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, errParse
	}
	return d, nil
}

// parseSize parses a byte size given as 8MiB, 512KB or 1048576.
func parseSize(v string) (int64, error) {
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<50 {
		return 0, fmt.Errorf("want a size such as 8MiB")
	}
	return int64(n), nil
}

func sizeText(n int64) string {
	if n == 0 { // not given: chosen (package sizing)
		return ""
	}
	return humanize.IBytes(uint64(n))
}

// The options of the plain kinds, a field of Config each.

func stringOption(o Option, field func(*Config) *string) Option {
	o.Kind = KindString
	return option(o, func(c *Config, v string) error { *field(c) = v; return nil },
		func(c *Config) string { return *field(c) })
}

func boolOption(o Option, field func(*Config) *bool) Option {
	o.Kind = KindBool
	return option(o, func(c *Config, v string) error {
		b, err := parseBool(v)
		if err != nil {
			return err
		}
		*field(c) = b
		return nil
	},
		func(c *Config) string { return strconv.FormatBool(*field(c)) })
}

func intOption(o Option, field func(*Config) *int) Option {
	o.Kind = KindInt
	return option(o, func(c *Config, v string) error {
		n, err := parseInt(v)
		if err != nil {
			return err
		}
		*field(c) = n
		return nil
	},
		func(c *Config) string { return strconv.Itoa(*field(c)) })
}

func option(o Option, set func(*Config, string) error, get func(*Config) string) Option {
	o.set, o.get = set, get
	return o
}

// Options returns the options of a mount, in the order of the table; the
// defaults shown are those of Defaults.
func Options() []Option {
	def := Defaults()
	opts := []Option{
		// Which source and index.
		option(Option{Name: "block-size", Commands: cmdIndexing, ConfigKey: "block_size",
			Help: "`size` of a block, the unit of disk reads: a block ends at the first record boundary at\nor after each multiple of it in its file (so it is this size plus at most one record),\nor after 65,536 records averaging under 32 bytes (--index full)\n(default: chosen from the dataset's size before indexing, so that a buffer holds at least\n256 blocks: a power of two from 512 bytes (1 MiB for s3://) to 8 MiB; see .corgifs/config.json)",
			// tune's help says its default in its own words.
			variants: []variant{{cmds: CmdTune,
				help: "block `size` of the data analysis and of the mount line (default: the size the\nstorage probe recommends, or the one a mount chooses with --probe=false)"}}},
			func(c *Config, v string) (err error) { c.BlockSize, err = parseSize(v); return err },
			func(c *Config) string { return sizeText(c.BlockSize) }),
		option(Option{Name: "include", Commands: cmdIndexing, ConfigKey: "include",
			Help: "comma separated `globs` of source file names to index (default: the format's,\nsuch as *.tfrecord,*.tfrecords or *.csv)"},
			func(c *Config, v string) error {
				c.Include = nil
				for _, p := range strings.Split(v, ",") {
					if p = strings.TrimSpace(p); p != "" {
						c.Include = append(c.Include, p)
					}
				}
				return nil
			},
			func(c *Config) string { return strings.Join(c.Include, ",") }),
		boolOption(Option{Name: "follow-symlinks", Default: "false", Commands: cmdIndexing,
			Help: "follow symbolic links to files and directories inside SRC (they may lead\noutside it; a directory reached twice, as in a loop, is listed once)"},
			func(c *Config) *bool { return &c.FollowSymlinks }),
		stringOption(Option{Name: "cache-dir", Default: def.CacheDir, Commands: cmdIndexing,
			Help: "`dir`ectory for index sidecars: never inside SRC, owned by the user running corgifs and\n" +
				"writable by nobody else (created with mode 0700). Default $XDG_CACHE_HOME/corgifs or\n" +
				"~/.cache/corgifs; without HOME and XDG_CACHE_HOME, /var/cache/corgifs for root, else required"},
			func(c *Config) *string { return &c.CacheDir }),
		stringOption(Option{Name: "s3-endpoint", Commands: cmdIndexing,
			Help: "`URL` of the S3 server for an s3://bucket/prefix SRC (default: AWS_ENDPOINT_URL_S3,\nAWS_ENDPOINT_URL, the profile's endpoint_url, else AWS S3). Credentials come from\nthe AWS chain, in its order: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN;\nthe profile AWS_PROFILE (else default) of ~/.aws/credentials and ~/.aws/config (or\nAWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE) with credential_process, SSO or role_arn +\nsource_profile; web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN); container\ncredentials (AWS_CONTAINER_CREDENTIALS_FULL_URI); the instance metadata service\n(AWS_EC2_METADATA_SERVICE_ENDPOINT). The mount logs which one it used"},
			func(c *Config) *string { return &c.S3.Endpoint }),
		stringOption(Option{Name: "s3-region", Commands: cmdIndexing,
			Help: "S3 `region` (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's region in the shared\nconfig file, else asked of the server)"},
			func(c *Config) *string { return &c.S3.Region }),
		boolOption(Option{Name: "s3-path-style", Default: "false", Commands: cmdIndexing,
			Help: "address buckets as ENDPOINT/BUCKET (MinIO and most S3 servers) rather than\nBUCKET.ENDPOINT (default: path style for IP addresses and non-AWS hosts)"},
			func(c *Config) *bool { return &c.S3.PathStyle }),
		intOption(Option{Name: "s3-concurrency", Default: strconv.Itoa(def.S3.Concurrency), Commands: cmdIndexing,
			Help: "S3 GET requests in flight at most. The default fills a 10 Gb/s link with 8 MiB blocks:\n1.25 GB/s is ~150 GETs/s of 8 MiB; one S3 connection moves ~85 MB/s, so a GET takes\n~0.1 s plus ~30 ms to its first byte, and 150/s × 0.13 s ≈ 19 in flight; 24 leaves room\nfor connections at ~65 MB/s. corgifs tune s3://… measures the right figure for a store"},
			func(c *Config) *int { return &c.S3.Concurrency }),
		option(Option{Name: "s3-timeout", Kind: KindDuration, Default: def.S3.Timeout.String(), Commands: cmdIndexing,
			Help: "deadline of one S3 request, body included; a failed request is tried 5 times\nwith exponential backoff and jitter, then its records give EIO"},
			func(c *Config, v string) (err error) { c.S3.Timeout, err = parseDuration(v); return err },
			func(c *Config) string { return c.S3.Timeout.String() }),
		stringOption(Option{Name: "index", Commands: cmdIndexing, ConfigKey: "dataset.index",
			Help: "how SRC is indexed: `full` reads every byte; probe reads a small window at each\nmultiple of --block-size to find the record boundary there (a mount of any size in\nseconds; record counts are learned as blocks load, so --strategy full, window, once\nand --equal-parts need full; a CSV file whose quoting a probe cannot settle is read\nwhole). Default: probe for s3://\nsources (unless --strategy or --equal-parts needs full), full for local ones"},
			func(c *Config) *string { return &c.Index }),
		boolOption(Option{Name: "skip-corrupt", Default: "false", Commands: cmdIndexing,
			Help: "leave damaged records out of the index instead of failing (they are listed in .corgifs/config.json)"},
			func(c *Config) *bool { return &c.SkipCorrupt }),
		stringOption(Option{Name: "compression", Default: index.CompressionAuto, Commands: cmdIndexing,
			Help: "how source files are compressed: auto (by the name's .gz, .zst, .zlib or .zz,\nthen by magic bytes: gzip, zstd, and zlib for TFRecord files), none, gzip, zlib or zstd;\ncompressed files are served decompressed, from access points, with no decompressed copy"},
			func(c *Config) *string { return &c.Compression }),
		boolOption(Option{Name: "direct-io", Default: "true", Commands: cmdIndexing,
			Help: "read source data that is not in the page cache with O_DIRECT: at the disk's speed,\nfor little CPU, without filling the page cache (falls back to the page cache\nwhere the file system refuses; blocks under 1 MiB are always read through it)"},
			func(c *Config) *bool { return &c.DirectIO }),

		// The records' format: looked up with its options by CheckFormat,
		// once all are parsed.
		option(Option{Name: "format", Commands: cmdFormat, ConfigKey: "format",
			Help: "`format` of the records: " + strings.Join(formats.Names(), ", ") +
				"\n(default: chosen from the file extensions; files of two formats are an error)"},
			func(c *Config, v string) error { c.FormatName = v; return nil },
			func(c *Config) string { return c.FormatName }),
		option(Option{Name: "header", Kind: KindBool, Commands: cmdFormat, ConfigKey: "header",
			Help: "csv: the first row of every file is the header, served once at the start of\nevery part (default true; --header=false: none)"},
			func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				c.FormatOptions.NoHeader = !b
				return err
			},
			func(c *Config) string { return strconv.FormatBool(!c.FormatOptions.NoHeader) }),
		option(Option{Name: "check", Kind: KindBool, Commands: cmdFormat,
			Help: "jsonl: check that every line is one JSON value when indexing"},
			func(c *Config, v string) error {
				b, err := strconv.ParseBool(v)
				c.FormatOptions.CheckJSON = b
				return err
			},
			func(c *Config) string { return strconv.FormatBool(c.FormatOptions.CheckJSON) }),
		option(Option{Name: "record-size", Commands: cmdFormat, ConfigKey: "record_size",
			Help: "fixed: `bytes` of every record"},
			func(c *Config, v string) error { _, err := fmt.Sscan(v, &c.FormatOptions.RecordSize); return err },
			func(c *Config) string { return strconv.FormatInt(c.FormatOptions.RecordSize, 10) }),
		option(Option{Name: "header-bytes", Commands: cmdFormat, ConfigKey: "source_header_bytes",
			Help: "fixed: `bytes` of header at the start of every source file, never served\n(default 0)"},
			func(c *Config, v string) error { _, err := fmt.Sscan(v, &c.FormatOptions.HeaderBytes); return err },
			func(c *Config) string { return strconv.FormatInt(c.FormatOptions.HeaderBytes, 10) }),

		// Which order.
		stringOption(Option{Name: "strategy", Default: def.Strategy, Commands: cmdOrdering, ConfigKey: "strategy",
			Help: "order `strategy`, one of:" + strategyHelp()},
			func(c *Config) *string { return &c.Strategy }),
		option(Option{Name: "buffer", Commands: cmdOrdering, ConfigKey: "buffer",
			Help: "shuffle buffer: a `size` (64MiB) or a percentage of a part (5%);\nlowered so that two buffers fit in --max-memory (default: 100% when all --parts fit,\ntwo buffers each, in half of --max-memory: an exact shuffle of each part; else a\n1/K share of that room, at least 256 blocks of the smallest block; 5% for window and mrs)"},
			func(c *Config, v string) (err error) { c.Buffer, err = shuffler.ParseBufferSize(v); return err },
			func(c *Config) string {
				if c.Buffer == (shuffler.BufferSize{}) { // not given: chosen (package sizing)
					return ""
				}
				return c.Buffer.String()
			}),
		option(Option{Name: "seed", Commands: cmdOrdering, ConfigKey: "seed",
			Help:     "`seed` of all random choices (default: chosen at random and logged)",
			variants: []variant{{cmds: CmdOrder, help: "`seed` of the order (required: the same seed as the mount's gives its order)"}}},
			func(c *Config, v string) error {
				seed, err := strconv.ParseUint(v, 0, 64)
				if err != nil {
					return optionErrorf("seed", "{seed} %q: want an unsigned integer", v)
				}
				c.Seed, c.SeedGiven = seed, true
				return nil
			},
			func(c *Config) string {
				if !c.SeedGiven {
					return ""
				}
				return strconv.FormatUint(c.Seed, 10)
			}),
		option(Option{Name: "max-memory", Default: sizeText(def.MaxMemory), Commands: cmdOrdering | CmdIndex | CmdTune, ConfigKey: "max_memory",
			Help: "memory `budget` for loaded blocks, shared by all open parts",
			variants: []variant{{cmds: CmdIndex, def: sizeText(def.MaxMemory),
				help: "memory `budget` of indexing: the index's per-record tables (4 bytes a record, 8 for\nformats without checksums) may take a quarter of it; a source of more records is refused"},
				{cmds: CmdTune, def: sizeText(def.MaxMemory),
					help: "memory `budget` of the mount tune advises for: the mount's default block and buffer\nare chosen within it (package sizing), and the mount line carries it"}}},
			func(c *Config, v string) (err error) { c.MaxMemory, err = parseSize(v); return err },
			func(c *Config) string { return sizeText(c.MaxMemory) }),
		option(Option{Name: "partition", Default: shuffler.PartitionRandom, Commands: cmdOrdering, ConfigKey: "partition",
			Help: "`how` --strategy local, pls, grab and cdgrab assign blocks to parts in epoch 0 (each part then\nkeeps its set): random (a seeded assignment, balanced by bytes) or contiguous\n(part i gets a contiguous run of the source: the worst case on clustered data)"},
			func(c *Config, v string) error {
				if v != shuffler.PartitionRandom && v != shuffler.PartitionContiguous {
					return fmt.Errorf("want %s or %s", shuffler.PartitionRandom, shuffler.PartitionContiguous)
				}
				c.Partition = v
				return nil
			},
			func(c *Config) string {
				if c.Partition == "" {
					return shuffler.PartitionRandom
				}
				return c.Partition
			}),
		option(Option{Name: "exchange", Default: strconv.FormatFloat(def.Exchange, 'g', -1, 64), Commands: cmdOrdering, ConfigKey: "exchange",
			Help: "fraction `Q` (0 ≤ Q ≤ 1) of its blocks each part of --strategy pls sends to the\nother parts before every epoch, receiving as many; 0 is local, 1 moves every block"},
			func(c *Config, v string) error {
				c.ExchangeGiven = true
				q, err := strconv.ParseFloat(v, 64)
				if err != nil || !(q >= 0 && q <= 1) {
					return fmt.Errorf("want a fraction Q with 0 ≤ Q ≤ 1, such as 0.3")
				}
				c.Exchange = q
				return nil
			},
			func(c *Config) string { return strconv.FormatFloat(c.Exchange, 'g', -1, 64) }),
		intOption(Option{Name: "feedback-dim", Default: strconv.Itoa(def.FeedbackDim), Commands: cmdOrdering,
			Help: "largest `dimension` of the feedback vectors a trainer writes (feedback strategies);\n" +
				"records × (4 × dim + 12) bytes of --max-memory are set aside for them",
			// validate sets it for its mounts, so its help says so and
			// shows no default.
			variants: []variant{{cmds: CmdValidate, def: "0",
				help: "set by validate itself, not a validate flag: its mounts get the dimension of the\nvectors it writes (see --sketch-dim); giving it is an error"}}},
			func(c *Config) *int { return &c.FeedbackDim }),
		option(Option{Name: "balance-rule", Default: def.BalanceRule.String(), Commands: cmdOrdering, ConfigKey: "balance_rule",
			Help: "sign `rule` of --strategy grab, cdgrab and corgipile-balance: deterministic (+1 when\n<r, c> <= 0, as the papers' code) or randomized (the paper's RandomizedBalance, seeded)"},
			func(c *Config, v string) error {
				c.BalanceRuleGiven = true
				r, ok := grab.ParseRule(v)
				if !ok {
					return fmt.Errorf("want deterministic or randomized")
				}
				c.BalanceRule = r
				return nil
			},
			func(c *Config) string { return c.BalanceRule.String() }),
		option(Option{Name: "feedback-timeout", Default: def.FeedbackTimeout.String(), Commands: cmdOrdering, ConfigKey: "feedback_timeout_seconds",
			Help: "how long the first open of epoch e+1 of a feedback strategy waits for epoch e's\nfeedback of all parts; then e+1 is served as a random reshuffle (logged, counted in\nstats.json)"},
			func(c *Config, v string) error {
				c.FeedbackTimeoutGiven = true
				d, err := time.ParseDuration(v)
				if err != nil || d <= 0 {
					return fmt.Errorf("want a positive duration such as 60s")
				}
				c.FeedbackTimeout = d
				return nil
			},
			func(c *Config) string { return c.FeedbackTimeout.String() }),
		boolOption(Option{Name: "equal-parts", Default: "false", Commands: cmdOrdering, ConfigKey: "equal_parts",
			Help: "make all K parts of an epoch hold the same number of records (for lock-step\ndistributed training such as DDP): the shorter parts end with repeats of small records\n(no larger than the average record; their own first, then the next parts'), drawn from the\nseed; the count is in .corgifs/config.json"},
			func(c *Config) *bool { return &c.EqualParts }),
		intOption(Option{Name: "parts", Default: strconv.Itoa(def.Parts), Commands: CmdMount | CmdOrder | CmdTune, ConfigKey: "parts",
			Help: "parts listed in each epoch directory (part-i-of-K with another K also resolves)",
			variants: []variant{
				{cmds: CmdOrder, help: "number of parts K", def: strconv.Itoa(def.Parts)},
				{cmds: CmdTune, help: "parts `K` of an epoch the mount will serve: --buffer is a share of a part", def: strconv.Itoa(def.Parts)},
			}},
			func(c *Config) *int { return &c.Parts }),

		// How the mount serves.
		option(Option{Name: "prefetch", Default: strconv.Itoa(blockcache.DefaultPrefetch), Commands: CmdMount | CmdValidate, ConfigKey: "prefetch",
			Help: "`buffers` each part loads ahead of the one being read, across the end of an epoch\n" +
				"(0: none, a buffer is loaded when the reader reaches it; prefetches only use memory\n" +
				"that is free within --max-memory)"},
			func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 || n > 1000 {
					return fmt.Errorf("want a number of buffers from 0 to 1000")
				}
				c.Prefetch = n
				if n == 0 {
					c.Prefetch = blockcache.NoPrefetch
				}
				return nil
			},
			func(c *Config) string {
				switch {
				case c.Prefetch == 0:
					return strconv.Itoa(blockcache.DefaultPrefetch)
				case c.Prefetch < 0:
					return "0"
				}
				return strconv.Itoa(c.Prefetch)
			}),
		stringOption(Option{Name: "coordinate", Commands: CmdMount,
			Help: "a `directory` every node of the job reaches and may write (a shared file system),\n" +
				"or s3://bucket/prefix of a store with conditional PUT (If-None-Match: *; --s3-* flags apply),\n" +
				"a fresh one per training run: with --strategy grab, cdgrab or corgipile-balance each node\n" +
				"publishes the feedback its trainer writes there, the node of --coordinate-rank 0 computes\n" +
				"each epoch's orders from all parts' feedback, and every node serves that one decision or\n" +
				"refuses (EIO); see docs/coordinate.md"},
			func(c *Config) *string { return &c.Coordinate }),
		option(Option{Name: "coordinate-rank", Commands: CmdMount,
			Help: "this node's `rank` among the nodes sharing --coordinate, unique per node:\n" +
				"0 is the order server (required with --coordinate)"},
			func(c *Config, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return fmt.Errorf("want 0 (the order server) or a larger integer")
				}
				c.CoordinateRank = n
				return nil
			},
			func(c *Config) string {
				if c.CoordinateRank < 0 {
					return ""
				}
				return strconv.Itoa(c.CoordinateRank)
			}),
		intOption(Option{Name: "epochs", Default: strconv.Itoa(def.Epochs), Commands: CmdMount, ConfigKey: "epochs",
			Help: "epoch directories listed in MNT (any epoch-NNNN resolves)"},
			func(c *Config) *int { return &c.Epochs }),
		boolOption(Option{Name: "allow-other", Default: "false", Commands: CmdMount,
			Help: "let other users read the mount (FUSE allow_other; needs user_allow_other in /etc/fuse.conf\nwhen not root; any local user can then read the dataset)"},
			func(c *Config) *bool { return &c.AllowOther }),
		stringOption(Option{Name: "feedback-group", Commands: CmdMount,
			Help: "let the members of `group` (a name or a GID) write feedback files too (feedback strategies,\n" +
				"with --allow-other); by default only the mount's owner and root may, and other users get EACCES"},
			func(c *Config) *string { return &c.FeedbackGroup }),
		option(Option{Name: "disk-cache", Commands: CmdMount,
			Help: "`dir`ectory where blocks read from the source are kept, checksummed, to be read from\n" +
				"there by later epochs and mounts (for S3 and slow shared file systems); owned by you and\n" +
				"writable by nobody else (created with mode 0700); one that cannot be written, or a full\n" +
				"disk, means no caching, with one log line. Default: no disk cache"},
			func(c *Config, v string) error {
				// Made absolute when given: a daemon may change its
				// working directory.
				if v == "" {
					c.DiskCache = ""
					return nil
				}
				p, err := filepath.Abs(v)
				if err != nil {
					return err
				}
				c.DiskCache = p
				return nil
			},
			func(c *Config) string { return c.DiskCache }),
		option(Option{Name: "disk-cache-size", Default: diskCacheSizeText(&def), Commands: CmdMount,
			Help: "`size` the --disk-cache may hold, such as 20GiB, or a percentage such as 50% of the\n" +
				"space free in its file system at mount (the cache's own entries counted as free); past\n" +
				"it, the blocks the coming epochs read last, or never, are evicted first"},
			setDiskCacheSize, diskCacheSizeText),
	}
	return opts
}

// setDiskCacheSize parses --disk-cache-size: a size, or a percentage of
// the free space of the cache's file system.
func setDiskCacheSize(c *Config, v string) error {
	if p, ok := strings.CutSuffix(strings.TrimSpace(v), "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f > 0 && f <= 100) {
			return fmt.Errorf("want a percentage in (0, 100], such as 50%%")
		}
		c.DiskCacheBytes, c.DiskCachePercent = 0, f
		return nil
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<60 {
		return fmt.Errorf("want a size such as 20GiB, or a percentage of the free space such as 50%%")
	}
	c.DiskCacheBytes, c.DiskCachePercent = int64(n), 0
	return nil
}

func diskCacheSizeText(c *Config) string {
	if c.DiskCacheBytes > 0 {
		return humanize.IBytes(uint64(c.DiskCacheBytes))
	}
	return strconv.FormatFloat(c.DiskCachePercent, 'g', -1, 64) + "%"
}

// strategyHelp lists the strategies with their descriptions, aligned.
func strategyHelp() string {
	var b strings.Builder
	w := 0
	for _, n := range shuffler.Strategies() {
		w = max(w, len(n))
	}
	for _, n := range shuffler.Strategies() {
		fmt.Fprintf(&b, "\n  %-*s %s", w, n, hint.Render(shuffler.Description(n), "--"))
	}
	return b.String()
}
