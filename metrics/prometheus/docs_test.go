package promlimit_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	promlimit "github.com/quotagate/quotagate/metrics/prometheus"
)

// The dashboard and the alerts in docs/ must only use metrics and labels
// that promlimit exposes, so that a rename here breaks this test rather than
// a dashboard in production.

var docLabels = map[string][]string{
	promlimit.RequestsTotal:                    {"bucket", "handler", "outcome", "key_source", "plan"},
	promlimit.RefundsTotal:                     {"bucket", "reason"},
	promlimit.BlockedTotal:                     {"bucket", "plan"},
	promlimit.IssuesTotal:                      {"bucket", "kind"},
	promlimit.StoreErrorsTotal:                 {"bucket", "failure_mode"},
	promlimit.StoreDurationSeconds + "_bucket": {"store", "op", "le"},
	promlimit.StoreDurationSeconds + "_sum":    {"store", "op"},
	promlimit.StoreDurationSeconds + "_count":  {"store", "op"},
	promlimit.WaitSeconds + "_bucket":          {"bucket", "result", "le"},
	promlimit.WaitSeconds + "_sum":             {"bucket", "result"},
	promlimit.WaitSeconds + "_count":           {"bucket", "result"},
	promlimit.SlotsInFlight:                    {"bucket"},
	promlimit.StoreEvictionsTotal:              {"store", "reason"},
	promlimit.StoreMayEvict:                    {"store", "policy"},
	promlimit.StoreSkippedTotal:                {"store", "reason"},
	promlimit.StoreBreakerOpen:                 {"store"},
	promlimit.StoreBreakerOpensTotal:           {"store"},
}

var (
	metricRE   = regexp.MustCompile(`quotagate_[a-z_]+`)
	selectorRE = regexp.MustCompile(`(quotagate_[a-z_]+)\{([^}]*)\}`)
	matcherRE  = regexp.MustCompile(`([a-z_]+)\s*(=~|!~|!=|=)`)
	groupingRE = regexp.MustCompile(`\b(?:by|on)\s*\(([^)]*)\)`)
)

// checkExpr reports metrics and labels in a PromQL expression that promlimit
// does not expose. Grouping labels must exist on at least one metric used.
func checkExpr(t *testing.T, where, expr string) {
	t.Helper()
	used := metricRE.FindAllString(expr, -1)
	if len(used) == 0 {
		t.Errorf("%s: no quotagate metric in %q", where, expr)
	}
	known := map[string]bool{}
	for _, m := range used {
		labels, ok := docLabels[m]
		if !ok {
			t.Errorf("%s: unknown metric %s in %q", where, m, expr)
		}
		for _, l := range labels {
			known[l] = true
		}
	}
	for _, sel := range selectorRE.FindAllStringSubmatch(expr, -1) {
		for _, mt := range matcherRE.FindAllStringSubmatch(sel[2], -1) {
			if !slices.Contains(docLabels[sel[1]], mt[1]) {
				t.Errorf("%s: %s has no label %q (%q)", where, sel[1], mt[1], expr)
			}
		}
	}
	for _, g := range groupingRE.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !known[l] {
				t.Errorf("%s: grouping by unknown label %q (%q)", where, l, expr)
			}
		}
	}
}

func readDoc(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + name)
	if os.IsNotExist(err) {
		t.Skipf("SKIPPED: ../../docs/%s not found: this test checks the repository's docs and needs a checkout of the whole repository", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDashboardUsesExposedMetrics(t *testing.T) {
	t.Parallel()
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(readDoc(t, "dashboard.json"), &dash); err != nil {
		t.Fatalf("docs/dashboard.json: %v", err)
	}
	titles := map[string]bool{}
	for _, p := range dash.Panels {
		titles[p.Title] = true
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			checkExpr(t, "dashboard panel "+p.Title, tg.Expr)
		}
	}
	for _, want := range []string{"Requests by outcome per handler", "Limited ratio per handler", "Degraded rate", "Store errors", "Store latency p50 / p99"} {
		if !titles[want] {
			t.Errorf("dashboard has no %q panel", want)
		}
	}
}

func TestAlertsUseExposedMetrics(t *testing.T) {
	t.Parallel()
	doc := string(readDoc(t, "observability.md"))
	// PromQL blocks.
	blocks := regexp.MustCompile("(?s)```promql\n(.*?)```").FindAllStringSubmatch(doc, -1)
	if len(blocks) != 3 {
		t.Errorf("%d promql blocks in docs/observability.md, want the 3 alerts", len(blocks))
	}
	for i, b := range blocks {
		checkExpr(t, "promql block "+string(rune('1'+i)), b[1])
	}
	// The rule file: three alerts whose expressions are the blocks above.
	rules := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(doc)
	if rules == nil {
		t.Fatal("no yaml rule file in docs/observability.md")
	}
	alerts := regexp.MustCompile(`(?m)^\s+- alert: (\w+)$`).FindAllStringSubmatch(rules[1], -1)
	exprs := regexp.MustCompile(`(?s)expr: \|\n(.*?)\n\s+for:`).FindAllStringSubmatch(rules[1], -1)
	if len(alerts) != 3 || len(exprs) != 3 {
		t.Fatalf("rule file has %d alerts and %d expressions, want 3 and 3", len(alerts), len(exprs))
	}
	norm := func(s string) string { return strings.Join(strings.Fields(s), " ") }
	for i, e := range exprs {
		checkExpr(t, "alert "+alerts[i][1], e[1])
		if i < len(blocks) && norm(e[1]) != norm(blocks[i][1]) {
			t.Errorf("alert %s expression differs from promql block %d:\n%s\n---\n%s", alerts[i][1], i+1, e[1], blocks[i][1])
		}
	}
	// An annotation's $labels are the labels its expression keeps: the
	// first "by (...)" of the expression.
	for i, part := range regexp.MustCompile(`(?m)^\s+- alert: `).Split(rules[1], -1)[1:] {
		kept := groupingRE.FindStringSubmatch(part)
		for _, l := range regexp.MustCompile(`\$labels\.(\w+)`).FindAllStringSubmatch(part, -1) {
			if kept == nil || !slices.Contains(strings.Split(strings.ReplaceAll(kept[1], " ", ""), ","), l[1]) {
				t.Errorf("alert %s: its annotation uses $labels.%s, which its expression does not keep (%q)", alerts[i][1], l[1], kept)
			}
		}
	}
}

// described returns the name and labels of every metric c describes, in
// order, each as "name{label,label}".
func described(c prometheus.Collector) []string {
	ch := make(chan *prometheus.Desc, 64)
	c.Describe(ch)
	close(ch)
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	var out []string
	for d := range ch {
		m := re.FindStringSubmatch(d.String())
		out = append(out, m[1]+"{"+m[2]+"}")
	}
	return out
}

type noEvictions struct{}

func (noEvictions) Evictions() (expired, live uint64)            { return 0, 0 }
func (noEvictions) EvictionPolicy() (policy string, evicts bool) { return "noeviction", false }

var numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
	"nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"}

// Every document that lists promlimit's metrics lists the metrics New
// registers and the two collectors add, with their labels, and the count
// README.md and docs/observability.md give is New's.
func TestDocsListEveryMetric(t *testing.T) {
	t.Parallel()
	obs, err := promlimit.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	registered := described(obs)
	all := slices.Concat(registered,
		described(promlimit.NewEvictionsCollector("memory", noEvictions{})),
		described(promlimit.NewEvictionPolicyCollector("redis", noEvictions{})))
	if len(registered) >= len(numberWords) {
		t.Fatalf("New registers %d metrics: extend numberWords", len(registered))
	}
	count := numberWords[len(registered)]
	pkgDoc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(readDoc(t, "../README.md"))
	observability := string(readDoc(t, "observability.md"))
	design := string(readDoc(t, "DESIGN.md"))
	for _, want := range []struct{ doc, text, phrase string }{
		{"README.md", readme, "`promlimit.New` registers " + count + " metrics"},
		{"docs/observability.md", observability, "into " + count + " Prometheus metrics"},
		{"docs/observability.md", observability, "registers its " + count + " metrics"},
	} {
		if !strings.Contains(want.text, want.phrase) {
			t.Errorf("%s does not say %q (New registers %d: %q)", want.doc, want.phrase, len(registered), registered)
		}
	}
	for _, m := range all {
		name, labels, _ := strings.Cut(strings.TrimSuffix(m, "}"), "{")
		if !strings.Contains(string(pkgDoc), "//\t"+m+" ") {
			t.Errorf("the package documentation (doc.go) does not list %s", m)
		}
		if !strings.Contains(design, "`"+m+"`") {
			t.Errorf("docs/DESIGN.md does not list `%s`", m)
		}
		if !strings.Contains(readme, "`"+name) {
			t.Errorf("README.md does not name %s", name)
		}
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(name) + "` \\| [a-z]+ \\| (.*) \\|$").FindStringSubmatch(observability)
		if row == nil || strings.ReplaceAll(strings.ReplaceAll(row[1], "`", ""), " ", "") != labels {
			t.Errorf("docs/observability.md's metric table has no row `%s` with the labels %s: %q", name, labels, row)
		}
		if _, ok := docLabels[name]; !ok && !strings.HasSuffix(name, "_seconds") {
			t.Errorf("docLabels lacks %s: the dashboard and alert checks would call it unknown", name)
		}
	}
}
