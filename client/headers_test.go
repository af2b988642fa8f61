package limitclient

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSpentReadsTheRateLimitFields(t *testing.T) {
	const none = time.Duration(-1) // spent reports false
	for _, tc := range []struct {
		name   string
		limit  []string
		policy []string
		want   time.Duration
	}{
		{"one_policy_spent", []string{`"default";r=0;t=12`}, nil, 12 * time.Second},
		{"quotagate_two_lines", []string{`"100p60";r=95;t=111`, `"1p1gb5";r=0;t=5`}, []string{`"100p60";q=100;w=60`, `"1p1gb5";q=1;w=1`}, time.Second},
		{"one_line_two_members", []string{`"100p60";r=0;t=40, "1p1gb5";r=0;t=5`}, []string{`"100p60";q=100;w=60, "1p1gb5";q=1;w=1`}, time.Second},
		{"token_name", []string{`default;r=0;t=3`}, nil, 3 * time.Second},
		{"escaped_name", []string{`"a\"b";r=0;t=9`}, []string{`"a\"b";q=3;w=3`}, time.Second},
		{"not_spent", []string{`"default";r=1;t=12`}, nil, none},
		{"unknown_params_ignored", []string{`"default";r=0;t=2;x=?1;pk=:AQID:;zz="s";w2=1.5`}, nil, 2 * time.Second},
		{"unknown_member_types_ignored", []string{`1;r=0;t=50, ?1, (a b);r=0, :AQ==:;r=0;t=9, "p";r=0;t=4`}, nil, 4 * time.Second},
		{"duplicate_param_last_wins", []string{`"p";r=0;t=100;t=3`}, nil, 3 * time.Second},
		{"policy_without_q", []string{`"p";r=0;t=8`}, []string{`"p";w=1`}, 8 * time.Second},
		{"policy_q_zero", []string{`"p";r=0;t=8`}, []string{`"p";q=0;w=1`}, 8 * time.Second},
		{"policy_broken_ignored", []string{`"p";r=0;t=8`}, []string{`"p";q=1;w=1,`}, 8 * time.Second},
		{"policy_of_another_name", []string{`"p";r=0;t=8`}, []string{`"o";q=1;w=1`}, 8 * time.Second},
		{"ows_and_sp", []string{`  "a";r=1;t=1 ,	"b"; r=0; t=7  `}, nil, 7 * time.Second},
		{"t_missing", []string{`"p";r=0`}, nil, none},
		{"t_negative", []string{`"p";r=0;t=-4`}, nil, none},
		{"t_fraction", []string{`"p";r=0;t=1.5`}, nil, none},
		{"t_string", []string{`"p";r=0;t="5"`}, nil, none},
		{"t_boolean", []string{`"p";r=0;t`}, nil, none},
		{"r_negative", []string{`"p";r=-1;t=4`}, nil, none},
		{"r_missing", []string{`"p";t=4`}, nil, none},
		{"t_ten_years", []string{`"p";r=0;t=315360000`}, nil, 315360000 * time.Second},
		{"t_fifteen_digits", []string{`"p";r=0;t=999999999999999`}, nil, maxHint},
		{"t_sixteen_digits", []string{`"p";r=0;t=9999999999999999`}, nil, none},
		{"trailing_comma", []string{`"p";r=0;t=4,`}, nil, none},
		{"unterminated_string", []string{`"p;r=0;t=4`}, nil, none},
		{"bad_escape", []string{`"p\x";r=0;t=4`}, nil, none},
		{"uppercase_key", []string{`"p";R=0;t=4`}, nil, none},
		{"garbage", []string{`r=0, t=5 @@`}, nil, none},
		{"one_bad_line_fails_the_field", []string{`"a";r=0;t=4`, `"b";r=0;t=)`}, nil, none},
		{"empty", []string{``}, nil, none},
		{"non_ascii", []string{"\"p\u00e9\";r=0;t=4"}, nil, none},
		{"many_members_bounded", []string{strings.Repeat(`"x";r=1, `, 40) + `"p";r=0;t=4`}, nil, none},
		{"other_types_as_params", []string{`"p";r=0;t=6;d=%"caf%c3%a9";at=@1659578233;b=:AQ==:;f=?0;x=-1.25;tk=a/b:c`}, nil, 6 * time.Second},
		{"inner_list_with_params", []string{`("a";x=1 b);n=2, "p";r=0;t=5`}, nil, 5 * time.Second},
		{"empty_inner_list", []string{`(), "p";r=0;t=5`}, nil, 5 * time.Second},
		{"display_bad_escape", []string{`"p";r=0;t=6;d=%"caf%C3"`}, nil, none},
		{"display_unterminated", []string{`"p";r=0;t=6;d=%"caf`}, nil, none},
		{"date_not_integer", []string{`"p";r=0;t=6;at=@1.5`}, nil, none},
		{"decimal_four_fraction_digits", []string{`"p";r=0;t=6;x=1.2345`}, nil, none},
		{"decimal_thirteen_integer_digits", []string{`"p";r=0;t=6;x=1234567890123.1`}, nil, none},
		{"inner_list_unterminated", []string{`("a" "b", "p";r=0;t=5`}, nil, none},
		{"inner_list_no_space", []string{`("a""b"), "p";r=0;t=5`}, nil, none},
		{"t_decimal_ignored", []string{`"p";r=0;t=5.0`}, nil, none},
		{"w_over_the_cap", []string{`"p";r=0;t=8`}, []string{`"p";q=1;w=999999999999999`}, 8 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{hRateLimit: tc.limit}
			if tc.policy != nil {
				h[hRateLimitPolicy] = tc.policy
			}
			got, ok := spent(h, time.Now())
			if !ok {
				got = none
			}
			if got != tc.want {
				t.Fatalf("spent = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSpentReadsTheTripletAndLegacyFields(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, tc := range []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"triplet", http.Header{hRateLimitRemaining: {"0"}, hRateLimitReset: {"6"}}, 6 * time.Second, true},
		{"triplet_no_reset", http.Header{hRateLimitRemaining: {"0"}}, 0, false},
		{"triplet_negative", http.Header{hRateLimitRemaining: {"0"}, hRateLimitReset: {"-6"}}, 0, false},
		{"triplet_huge", http.Header{hRateLimitRemaining: {"0"}, hRateLimitReset: {"99999999999999999999999"}}, maxHint, true},
		{"legacy_epoch", http.Header{hXRateLimitRemaining: {"0"}, hXRateLimitReset: {"1800000030"}}, 30 * time.Second, true},
		{"legacy_epoch_past", http.Header{hXRateLimitRemaining: {"0"}, hXRateLimitReset: {"1700000000"}}, 0, true},
		{"legacy_delta", http.Header{hXRateLimitRemaining: {"0"}, hXRateLimitReset: {"45"}}, 45 * time.Second, true},
		{"legacy_fraction", http.Header{hXRateLimitRemaining: {"0"}, hXRateLimitReset: {"4.5"}}, 0, false},
		{"legacy_remaining_garbage", http.Header{hXRateLimitRemaining: {"none"}, hXRateLimitReset: {"45"}}, 0, false},
		{"nothing", http.Header{}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := spent(tc.header, now)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("spent = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestPartitionsAreBounded(t *testing.T) {
	ps := partitions{max: 2}
	ps.create("a", 0).extend(100)
	ps.create("b", 0).extend(200)
	if p := ps.create("c", 50); p != nil {
		t.Fatal("created a third partition while both others are spent")
	}
	if p := ps.create("c", 150); p == nil {
		t.Fatal("no room made by forgetting the partition whose wait is over")
	}
	if ps.get("a") != nil || ps.get("b") == nil || ps.get("c") == nil {
		t.Fatal("wrong partition forgotten")
	}
}

func TestExtendNeverShortens(t *testing.T) {
	var p partition
	p.extend(100)
	p.extend(50)
	if got := p.until.Load(); got != 100 {
		t.Fatalf("until = %d, want 100", got)
	}
}
