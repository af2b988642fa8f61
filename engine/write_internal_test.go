package limit

import (
	"math"
	"strconv"
	"testing"
)

// text renders every number as strconv does: at each length, around each
// power of ten, at the bounds of int64, with room and without (the
// strconv fallback), and the strings it returned before keep their value.
func TestTextRendersNumbersAsStrconv(t *testing.T) {
	ns := []int64{0, 1, 9, 99, 100, math.MaxInt64, math.MinInt64, -1, -9, -10, -99, -100, maxHeaderInt, maxDelayMS}
	for p := int64(10); p < math.MaxInt64/10; p *= 10 {
		ns = append(ns, p-1, p, p+1, p*5+3, -p, -p+1)
	}
	for _, room := range []int{0, 40, 400} {
		tx := text{b: make([]byte, 0, room)}
		var got []string
		for _, n := range ns {
			if l, want := decimalLen(n), len(strconv.FormatInt(n, 10)); l != want {
				t.Fatalf("decimalLen(%d) = %d, want %d", n, l, want)
			}
			got = append(got, tx.number(n))
		}
		for i, n := range ns {
			if want := strconv.FormatInt(n, 10); got[i] != want {
				t.Fatalf("room %d: number(%d) = %q, want %q", room, n, got[i], want)
			}
		}
	}
}

// newBlock hands out n slots and room for size bytes, whatever the sizes.
func TestNewBlockFitsEverySize(t *testing.T) {
	for n := 1; n <= 40; n++ {
		for size := 0; size <= 300; size++ {
			slots, text := newBlock(n, size)
			if len(slots) != n || len(text) != 0 || cap(text) < size {
				t.Fatalf("newBlock(%d, %d): %d slots, text len %d cap %d", n, size, len(slots), len(text), cap(text))
			}
		}
	}
}
