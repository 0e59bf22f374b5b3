package grants

import (
	"strconv"
	"testing"
)

func TestExactNumber(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"100", true}, {"1e2", true}, {"100.000", true}, {"1.00E+2", true}, {"0.1", true}, {"-0", true}, {"0e999999999", true},
		{"9007199254740992", true}, {"1.7976931348623157e308", true}, {"5e-324", true}, {"123456789012345678e-2", false},
		{"100.00000000000000001", false}, {"9007199254740993", false}, {"0.30000000000000001", false},
		{"1e-400", false}, {"100000000000000000001e-18", false}, {"0.1000000000000000055511151231257827", false},
	} {
		f, err := strconv.ParseFloat(tc.s, 64)
		if err != nil && tc.want {
			t.Fatalf("%s: %v", tc.s, err)
		}
		if got := exactNumber(tc.s, f); got != tc.want {
			t.Errorf("exactNumber(%s) = %v, want %v", tc.s, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { exactNumber("100.25", 100.25) }); n != 0 {
		t.Errorf("exactNumber allocates %v times", n)
	}
}

func TestDotLike(t *testing.T) {
	for seg, want := range map[string]bool{
		".": true, "..": true, ". ": true, ".. ": true, "．．": true, ".．": true, "﹒": true, "․․": true, "‥": true,
		"...": false, " ..": false, "a.": false, "…": false, "‥.": false, " ": false, "..x": false,
	} {
		if got := dotLike(seg); got != want {
			t.Errorf("dotLike(%q) = %v, want %v", seg, got, want)
		}
	}
}
