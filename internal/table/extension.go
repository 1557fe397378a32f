package table

// Extension runs inside a table's atomic operations, under the table's lock,
// as Reverb's TableExtension does. Each hook sees the table in the state
// right after the operation. Hooks must be fast, must not block, and must
// not call back into the table or keep the *Item past the call (its fields
// change as the table works).
//
// Embed NoopExtension to implement only the hooks you need.
type Extension interface {
	// OnInsert runs after a new item is added.
	OnInsert(item *Item)
	// OnSample runs after an item is sampled; item.TimesSampled counts it.
	OnSample(item *Item)
	// OnUpdate runs after an item's priority changes.
	OnUpdate(item *Item, oldPriority float64)
	// OnDelete runs after an item leaves the table by delete, eviction or
	// max_times_sampled (not by Reset).
	OnDelete(item *Item)
	// OnReset runs when Reset removes every item, before their chunk
	// references are dropped (as OnDelete runs before an item's are).
	OnReset()
}

// NoopExtension implements Extension with hooks that do nothing.
type NoopExtension struct{}

func (NoopExtension) OnInsert(*Item)          {}
func (NoopExtension) OnSample(*Item)          {}
func (NoopExtension) OnUpdate(*Item, float64) {}
func (NoopExtension) OnDelete(*Item)          {}
func (NoopExtension) OnReset()                {}
