package bufpool

import "testing"

func TestPool(t *testing.T) {
	var p Pool
	for _, n := range []int{0, 1, 255, 256, 257, 1024, 4096, 1 << 22, 1<<22 + 1, 10 << 20} {
		b := p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) returned %d bytes", n, len(*b))
		}
		if c := class(n); c >= 0 && cap(*b) != 1<<(c+minShift) {
			t.Fatalf("Get(%d) has capacity %d, not its class's", n, cap(*b))
		}
		p.Put(b)
		b = p.Get(n)
		if len(*b) != n {
			t.Fatalf("Get(%d) after Put returned %d bytes", n, len(*b))
		}
	}
	odd := make([]byte, 0, 3000)
	p.Put(&odd) // not a class size: dropped
	if b := p.Get(3000); cap(*b) != 4096 {
		t.Fatalf("Get(3000) has capacity %d, want 4096", cap(*b))
	}
}

func TestPoison(t *testing.T) {
	p := Pool{Poison: true}
	b := p.Get(300)
	buf := *b
	clear(buf)
	p.Put(b)
	for i, x := range buf[:300] {
		if x != 0xa5 {
			t.Fatalf("byte %d of a freed buffer is %#x, want poison", i, x)
		}
	}
}
