package tune

// Advice is what tune measured and advises, as corgifs tune prints it
// and its --json form.
type Advice struct {
	Source    string         `json:"source"`
	Storage   *StorageReport `json:"storage,omitempty"`
	BlockSize int64          `json:"block_size"`
	Label     string         `json:"label,omitempty"`
	Features  string         `json:"features,omitempty"`
	Data      *DataReport    `json:"data,omitempty"`
	Buffer    *BufferChoice  `json:"buffer,omitempty"`
	Defaults  *DefaultsMix   `json:"defaults,omitempty"`
	Mount     string         `json:"mount"`
}
