package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// results is everything the guide shows, computed by the engine.
type results struct {
	phase       time.Duration     // client's phase
	herdPhases  []time.Duration   // herdIdentity(i)'s phase
	single      [][]outcome       // per variants[i]
	ownBoundary []outcome         // fixed-phased, burst B moved across client's own boundary
	herd        [][]int           // per herdVariants[i]: admitted per second
	obedient    [][]attempt       // per variants[i]
	blocks      map[string]string // generated Markdown sections of docs/algorithms.md
}

// collect runs every scenario.
func collect() (*results, error) {
	r := &results{blocks: map[string]string{}}
	var err error
	if r.phase, err = phaseOf(client); err != nil {
		return nil, err
	}
	for i := range herdClients {
		p, err := phaseOf(herdIdentity(i))
		if err != nil {
			return nil, err
		}
		r.herdPhases = append(r.herdPhases, p)
	}
	for _, v := range variants {
		out, err := runSingle(v, traffic())
		if err != nil {
			return nil, err
		}
		r.single = append(r.single, out)
		att, err := runObedient(v)
		if err != nil {
			return nil, err
		}
		r.obedient = append(r.obedient, att)
	}
	// Moved by the phase, the burst straddles the client's own boundary
	// (30 s + phase) exactly as the original straddles 30 s.
	if r.ownBoundary, err = runSingle(variants[1], shiftBurstB(traffic(), r.phase)); err != nil {
		return nil, err
	}
	for _, v := range herdVariants {
		ps, err := runHerd(v)
		if err != nil {
			return nil, err
		}
		r.herd = append(r.herd, ps)
	}
	r.blocks["phases"] = r.phasesBlock()
	r.blocks["single"] = r.singleBlock()
	r.blocks["many-clients"] = r.herdBlock()
	r.blocks["retry-after"] = r.retryBlock()
	return r, nil
}

// shiftBurstB moves the burst-B requests of reqs by d.
func shiftBurstB(reqs []request, d time.Duration) []request {
	out := slices.Clone(reqs)
	for i := range out {
		if out[i].seg == burstB {
			out[i].at += d
		}
	}
	return out
}

// figures returns every figure of the guide.
func (r *results) figures() ([]figure, error) {
	var fs []figure
	for i, v := range variants {
		f, err := singleFigure(v, r.single[i], r.phase)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	for _, build := range []func() (figure, error){
		func() (figure, error) { return comparisonFigure(r.single) },
		func() (figure, error) { return herdFigure(r.herd) },
		func() (figure, error) { return retryFigure(r.obedient) },
	} {
		f, err := build()
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	return fs, nil
}

func (r *results) phasesBlock() string {
	var b strings.Builder
	fmt.Fprintf(&b, "`%s` has phase **%s**: its fixed and sliding windows of 10 s start at %s + 10 s·k.\n",
		client, seconds(r.phase), seconds(r.phase))
	fmt.Fprintf(&b, "The %d clients of the many-clients scenario (`%s` to `%s`) have these phases (s):\n\n",
		herdClients, herdIdentity(0), herdIdentity(herdClients-1))
	tableHead(&b, "client", "phase", "client", "phase", "client", "phase", "client", "phase")
	for row := range herdClients / 4 {
		b.WriteString("|")
		for col := range 4 {
			i := col*(herdClients/4) + row
			fmt.Fprintf(&b, " `%s` | %.3f |", herdIdentity(i), r.herdPhases[i].Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}

func (r *results) singleBlock() string {
	var b strings.Builder
	tableHead(&b, "algorithm", "burst at 0 s (15)", "trickle, 3 s to 17 s (8)", "burst across 30 s (24)", "total (47)", "most admitted in any 10 s")
	for i, v := range variants {
		out := r.single[i]
		fmt.Fprintf(&b, "| %s |", v.name)
		total := 0
		for _, s := range segments {
			a, _ := tally(out, s)
			total += a
			fmt.Fprintf(&b, " %d |", a)
		}
		m, at := maxIn(out, window)
		fmt.Fprintf(&b, " %d | %d, from %s |\n", total, m, seconds(at))
	}
	a, n := tally(r.ownBoundary, burstB)
	first, last := segmentSpan(r.ownBoundary, burstB)
	fmt.Fprintf(&b, "\nThe same %d-request burst moved to %.2f s to %.2f s, across `%s`'s own boundary at %s: the fixed window with per-identity phase admits **%d**.\n",
		n, first, last, client, seconds(r.phase+30*time.Second), a)
	return b.String()
}

func (r *results) herdBlock() string {
	var b strings.Builder
	tableHead(&b, "algorithm", "admitted in second 0", "then per second: min", "max", "mean", "seconds with 0 admitted")
	for i, v := range herdVariants {
		ps := r.herd[i]
		rest := ps[1:]
		sum, zero := 0, 0
		for _, n := range rest {
			sum += n
			if n == 0 {
				zero++
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f | %d of %d |\n", v.name, ps[0],
			slices.Min(rest), slices.Max(rest), float64(sum)/float64(len(rest)), zero, len(rest))
	}
	return b.String()
}

func (r *results) retryBlock() string {
	var b strings.Builder
	tableHead(&b, "algorithm", "sent", "admitted", "denied", "Retry-After sent (s)", "exact RetryAfter (ms)", "retries admitted")
	for i, v := range variants {
		att := r.obedient[i]
		var admitted, denied, retries, retriesOK int
		var headers []string
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for _, a := range att {
			if a.retry {
				retries++
				if a.allowed {
					retriesOK++
				}
			}
			if a.allowed {
				admitted++
				continue
			}
			denied++
			headers = append(headers, fmt.Sprint(a.header))
			lo, hi = min(lo, a.retryAfter), max(hi, a.retryAfter)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s | %d to %d | %d of %d |\n", v.name, len(att), admitted, denied,
			summarize(headers), lo.Milliseconds(), hi.Milliseconds(), retriesOK, retries)
	}
	return b.String()
}

// tableHead writes a Markdown table's header row and separator.
func tableHead(b *strings.Builder, cols ...string) {
	b.WriteString("| " + strings.Join(cols, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(cols)) + "|\n")
}

// summarize lists values in order, collapsing runs: "9, 1 ×22".
func summarize(vs []string) string {
	var parts []string
	for i := 0; i < len(vs); {
		j := i
		for j < len(vs) && vs[j] == vs[i] {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%s ×%d", vs[i], j-i))
		} else {
			parts = append(parts, vs[i])
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

// doc markers around a generated section of docs/algorithms.md.
func beginMarker(name string) string {
	return "<!-- BEGIN GENERATED by docs/plots (go generate ./... there): " + name + " -->"
}

func endMarker(name string) string { return "<!-- END GENERATED: " + name + " -->" }

// splice replaces every generated section of doc with blocks; it fails when a
// marker is missing, so that a renamed section cannot silently go stale.
func splice(doc string, blocks map[string]string) (string, error) {
	names := make([]string, 0, len(blocks))
	for n := range blocks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		begin, end := beginMarker(n), endMarker(n)
		i := strings.Index(doc, begin)
		j := strings.Index(doc, end)
		if i < 0 || j < i {
			return "", fmt.Errorf("docs/algorithms.md: markers %q ... %q not found", begin, end)
		}
		doc = doc[:i+len(begin)] + "\n" + blocks[n] + doc[j:]
	}
	return doc, nil
}
