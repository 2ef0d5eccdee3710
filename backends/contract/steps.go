package contract

import (
	"fmt"
	"strconv"
)

// StepLines reads one run's step lines, line by line, and checks each record
// against the run and the records before it, which ParseStepLines, reading one
// line alone, cannot: its rank must be one of the run's (0 to world size - 1),
// and each rank reports each measured step once, in order. A script that prints
// the same step five times, or a rank the run does not have, would otherwise
// count as five good steps, or as a rank's figures that no rank measured. A
// rank's lines reach stdout in the order it printed them (one process, one
// pipe), even when other ranks' lines fall between them, so a step at or below
// the rank's last is a repeat, never a reordering. Memory is one step number per
// rank. The zero value knows no world size and checks only the order; use
// NewStepLines. Not safe for concurrent use.
type StepLines struct {
	worldSize int
	last      map[int]int // each rank's last step
}

// NewStepLines returns the StepLines of a run of worldSize ranks (0: unknown,
// no rank is refused for being outside the world).
func NewStepLines(worldSize int) *StepLines {
	return &StepLines{worldSize: worldSize}
}

// Parse reads one stdout line as ParseStepLines does, then refuses, as a broken
// line, each record whose rank is outside the run's world or whose step its
// rank already reported (or passed). The errors quote the line.
func (c *StepLines) Parse(line string) (sts []StepLine, errs []error) {
	all, errs := ParseStepLines(line)
	sts = all[:0]
	for _, st := range all {
		if err := c.check(st); err != nil {
			errs = append(errs, fmt.Errorf("step line: %w: %s", err, quoteLine(line)))
			continue
		}
		sts = append(sts, st)
	}
	return sts, errs
}

// check takes st as its rank's next step, or says why it cannot be.
func (c *StepLines) check(st StepLine) error {
	if c.worldSize > 0 && st.Rank >= c.worldSize {
		return fmt.Errorf("rank is %d but the run has %s (ranks 0 to %d): the line is no rank's of this run; print the rank's own number (torch.distributed.get_rank())",
			st.Rank, plural(c.worldSize, "rank"), c.worldSize-1)
	}
	last, seen := c.last[st.Rank]
	switch {
	case seen && st.Step.Step == last:
		return fmt.Errorf("rank %d reported step %d twice: each measured step is reported once (a repeated step would count its time and tokens twice)",
			st.Rank, last)
	case seen && st.Step.Step < last:
		return fmt.Errorf("rank %d reported step %d after step %d: each measured step is reported once, in order (steps count from 1 and do not start again)",
			st.Rank, st.Step.Step, last)
	}
	if c.last == nil {
		c.last = map[int]int{}
	}
	c.last[st.Rank] = st.Step.Step
	return nil
}

// plural is "1 rank" or "n ranks".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
