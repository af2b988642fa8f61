package promlimit_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

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
}
