package h2grpc

// idWindow is how many of the most recent client stream ids an idSet
// remembers.
const idWindow = 4096

// idSet records a property of the most recent idWindow client-initiated
// (odd) stream ids: here, which streams the client has ended or reset, so
// that its frames on them after that are answered as RFC 9113 (5.1) asks
// even once the server has forgotten the stream. Older ids are not known.
// Only the connection's reader touches it.
type idSet struct {
	bits [idWindow / 64]uint64
	top  uint32 // the highest id advanced to
}

func (s *idSet) pos(id uint32) (int, uint64) {
	i := (id >> 1) % idWindow
	return int(i / 64), 1 << (i % 64)
}

// advance makes the ids up to top known, clearing what the ids they
// replace in the window recorded.
func (s *idSet) advance(top uint32) {
	if top <= s.top {
		return
	}
	if (top-s.top)/2 >= idWindow {
		s.bits = [idWindow / 64]uint64{}
	} else {
		for id := s.top + 1; id <= top; id++ {
			if id%2 == 1 {
				w, b := s.pos(id)
				s.bits[w] &^= b
			}
		}
	}
	s.top = top
}

func (s *idSet) known(id uint32) bool {
	return id%2 == 1 && id <= s.top && (s.top-id)/2 < idWindow
}

// add records id, if it is known.
func (s *idSet) add(id uint32) {
	if s.known(id) {
		w, b := s.pos(id)
		s.bits[w] |= b
	}
}

// has reports whether id is known and recorded.
func (s *idSet) has(id uint32) bool {
	if !s.known(id) {
		return false
	}
	w, b := s.pos(id)
	return s.bits[w]&b != 0
}
