package h2grpc

// idWindow is how many of the most recent client stream ids streamMarks
// remembers.
const idWindow = 4096

// What streamMarks records of a stream.
const (
	markOpened = iota // the client opened the stream (ids it skipped are closed unopened)
	markEnded         // the client sent END_STREAM
	markReset         // the client sent RST_STREAM
	numMarks
)

// streamMarks records marks of the most recent idWindow client-initiated
// (odd) stream ids: which streams the client has opened, ended or reset, so that
// its frames on them after that are answered as RFC 9113 (5.1) asks even
// once the server has forgotten the stream. Older ids are not known.
// Only the connection's reader touches it.
type streamMarks struct {
	bits [numMarks][idWindow / 64]uint64
	top  uint32 // the highest id advanced to
}

func (s *streamMarks) pos(id uint32) (int, uint64) {
	i := (id >> 1) % idWindow
	return int(i / 64), 1 << (i % 64)
}

// advance makes the ids up to top known, clearing the marks of the ids
// they replace in the window.
func (s *streamMarks) advance(top uint32) {
	if top <= s.top {
		return
	}
	if (top-s.top)/2 >= idWindow {
		s.bits = [numMarks][idWindow / 64]uint64{}
	} else {
		for id := s.top + 1; id <= top; id++ {
			if id%2 == 1 {
				w, b := s.pos(id)
				for m := range s.bits {
					s.bits[m][w] &^= b
				}
			}
		}
	}
	s.top = top
}

func (s *streamMarks) known(id uint32) bool {
	return id%2 == 1 && id <= s.top && (s.top-id)/2 < idWindow
}

// add marks id, if it is known.
func (s *streamMarks) add(id uint32, mark int) {
	if s.known(id) {
		w, b := s.pos(id)
		s.bits[mark][w] |= b
	}
}

// has reports whether id is known and marked.
func (s *streamMarks) has(id uint32, mark int) bool {
	if !s.known(id) {
		return false
	}
	w, b := s.pos(id)
	return s.bits[mark][w]&b != 0
}
