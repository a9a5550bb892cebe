package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/corgifs/corgifs/grab"
	"github.com/corgifs/corgifs/shuffler"
)

// ruleFlag is --balance-rule: the sign rule of the feedback strategies.
type ruleFlag struct{ r grab.Rule }

func (f *ruleFlag) String() string { return f.r.String() }
func (f *ruleFlag) Set(v string) error {
	r, ok := grab.ParseRule(v)
	if !ok {
		return fmt.Errorf("want deterministic or randomized")
	}
	f.r = r
	return nil
}

// durationFlag is a time.Duration flag for givenFlag.
type durationFlag struct{ d time.Duration }

func (f *durationFlag) String() string { return f.d.String() }
func (f *durationFlag) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 60s")
	}
	f.d = d
	return nil
}

// balanceFlags are the settings of the feedback strategies (grab, cdgrab,
// corgipile-balance).
type balanceFlags struct {
	// printOnly is set by commands that print orders (corgifs order).
	printOnly    bool
	rule         ruleFlag
	ruleGiven    bool
	timeout      durationFlag
	timeoutGiven bool
}

func (b *balanceFlags) register(fs *flag.FlagSet) {
	b.timeout.d = shuffler.DefaultFeedbackTimeout
	fs.Var(givenFlag{&b.rule, &b.ruleGiven}, "balance-rule", "sign `rule` of --strategy grab, cdgrab and corgipile-balance: deterministic (+1 when\n<r, c> <= 0, as the papers' code) or randomized (the paper's RandomizedBalance, seeded)")
	fs.Var(givenFlag{&b.timeout, &b.timeoutGiven}, "feedback-timeout", "how long the first open of epoch e+1 of a feedback strategy waits for epoch e's\nfeedback of all parts; then e+1 is served as a random reshuffle (logged, counted in\nstats.json)")
}
