package validate

import (
	"strconv"
	"strings"

	"github.com/corgifs/corgifs/shuffler"
)

// A strategyRun is one entry of Strategies: a strategy and, for pls,
// its exchange fraction, and the label of its results.
type strategyRun struct {
	label    string
	strategy string
	exchange float64 // pls's Q
}

// runs parses Strategies (pls:Q gives pls its own Q; a plain pls takes
// Mount.Exchange) and refuses a Partition or an Exchange given where no
// strategy uses them.
func (c *Config) runs() ([]strategyRun, error) {
	var runs []strategyRun
	var partitioned, plainPLS bool
	list := strings.Join(c.Strategies, ",")
	for _, s := range c.Strategies {
		name, q, hasQ := strings.Cut(s, ":")
		if !shuffler.IsStrategy(name) {
			return nil, optionErrorf("strategies", "unknown strategy %q in {strategies} (choose from %s)", name, strings.Join(shuffler.Strategies(), ", "))
		}
		r := strategyRun{label: name, strategy: name}
		switch {
		case hasQ && name != "pls":
			return nil, optionErrorf("strategies", "%q in {strategies}: only pls takes an exchange fraction (pls:Q)", s)
		case hasQ:
			f, err := strconv.ParseFloat(q, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return nil, optionErrorf("strategies", "%q in {strategies}: want a fraction Q with 0 ≤ Q ≤ 1, such as 0.3", s)
			}
			r.exchange = f
		case name == "pls":
			r.exchange = c.Mount.Exchange
			plainPLS = true
		}
		if name == "pls" {
			// The label says the Q, so that runs of several Q compare.
			r.label = "pls:" + strconv.FormatFloat(r.exchange, 'g', -1, 64)
		}
		partitioned = partitioned || shuffler.Partitioned(name)
		runs = append(runs, r)
	}
	if c.Mount.Partition != "" && !partitioned {
		return nil, optionErrorf("partition", "{partition} applies to the strategies local, pls, grab and cdgrab (the set each part keeps); {strategies} %s has none of them", list)
	}
	if c.Mount.ExchangeGiven && !plainPLS {
		return nil, optionErrorf("exchange", "{exchange} is the Q of pls in {strategies} (local is pls with Q 0); {strategies} %s has no pls without its own pls:Q", list)
	}
	return runs, nil
}

// checkWorkers checks Workers and SyncEvery against Batch.
func (c *Config) checkWorkers() error {
	switch {
	case c.SyncEvery < 0:
		return optionErrorf("sync-every", "{sync-every} %d: want 0 (synchronous SGD) or a number of steps ≥ 1", c.SyncEvery)
	case c.SyncEvery > 0 && c.Workers == 1:
		return optionErrorf("sync-every", "{sync-every} averages the models of several workers: pass {workers} K with K > 1")
	case max(c.Batch, 1)%c.Workers != 0:
		return optionErrorf("batch", "{batch} %d is not a multiple of {workers} %d: every step takes {batch}/K records of each part (try {batch} %d)",
			c.Batch, c.Workers, c.Workers*max(1, c.Batch/c.Workers))
	}
	return nil
}

// checkFeedback refuses the feedback options where no run of Strategies
// takes feedback.
func (c *Config) checkFeedback(runs []strategyRun) error {
	for _, r := range runs {
		if !shuffler.IsFeedback(r.strategy) {
			continue
		}
		if c.SketchDim < 1 {
			return optionErrorf("sketch-dim", "{sketch-dim} %d: want at least 1", c.SketchDim)
		}
		return nil
	}
	list := strings.Join(c.Strategies, ",")
	switch {
	case c.Mount.BalanceRuleGiven:
		return optionErrorf("balance-rule", "{balance-rule} applies to the strategies grab, cdgrab and corgipile-balance; {strategies} %s has none", list)
	case c.Mount.FeedbackTimeoutGiven:
		return optionErrorf("feedback-timeout", "{feedback-timeout} applies to the strategies grab, cdgrab and corgipile-balance; {strategies} %s has none", list)
	}
	return nil
}
