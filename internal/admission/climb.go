package admission

// Climber hill-climbs one route's limit (paper 001's page scheduler): after
// each window at a limit, Step is given that window's throughput; the limit
// moves by 1 in the current direction while throughput does not drop, and
// the direction reverses when it drops. The limit stays within [1, max].
//
// On a route whose throughput rises with its concurrency up to a knee and
// falls beyond it (thrashing), the limit climbs to the knee and then
// circles it: knee-1, knee, knee+1.
//
// Concurrency: none; its owner serialises calls.
type Climber struct {
	limit, dir int
	prev       float64
	havePrev   bool
}

// NewClimber starts at limit (at least 1), moving up.
func NewClimber(limit int) Climber {
	return Climber{limit: max(limit, 1), dir: 1}
}

// Limit is the current limit.
func (c *Climber) Limit() int { return c.limit }

// Step takes the throughput measured over a window at the current limit
// and returns the next limit, at most hi (hi < 1 counts as 1).
func (c *Climber) Step(throughput float64, hi int) int {
	hi = max(hi, 1)
	if c.havePrev && throughput < c.prev {
		c.dir = -c.dir
	}
	c.prev, c.havePrev = throughput, true
	next := c.limit + c.dir
	switch {
	case next > hi:
		next, c.dir = hi, -1
	case next < 1:
		next, c.dir = 1, 1
	}
	c.limit = next
	return next
}

// Cap lowers the limit to hi when m shrank below it (no measurement).
func (c *Climber) Cap(hi int) {
	if c.limit > max(hi, 1) {
		c.limit = max(hi, 1)
	}
}
