package feedback

// The records of the coordination in the shared place: their names, the
// epoch's Decision, each node's NodeDigest, and the canonical encoding and
// digest of an epoch's orders.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Names in the shared place.
func sharedFeedbackName(epoch, part, parts int) string {
	return fmt.Sprintf("epoch-%04d/feedback/part-%05d-of-%05d%s", epoch, part, parts, feedbackExt)
}
func sharedDecisionName(epoch, parts int) string {
	return fmt.Sprintf("epoch-%04d/decision-of-%05d.json", epoch, parts)
}
func sharedOrdersName(epoch, parts int, digest string) string {
	// Named by content: two servers (two nodes given rank 0) that compute
	// the same orders write the same name, and a name never holds two
	// contents.
	return fmt.Sprintf("epoch-%04d/orders-of-%05d-%s.bin", epoch, parts, strings.TrimPrefix(digest, digestPrefix)[:16])
}
func sharedDigestName(epoch, parts, rank int) string {
	return fmt.Sprintf("epoch-%04d/digest-of-%05d-rank-%05d.json", epoch, parts, rank)
}

const (
	feedbackExt  = ".f32"
	digestPrefix = "sha256:"
	ordersMagic  = "CGOS"
	// recentDecisions are the decisions status.json lists.
	recentDecisions = 16
)

// Decision is the shared record of how epoch (of parts) is ordered, taken
// once for every node: decision-of-KKKKK.json in the epoch's directory.
type Decision struct {
	Epoch int `json:"epoch"`
	Parts int `json:"parts"`
	// Balanced: the orders come from the previous epoch's feedback of all
	// parts, in the Orders file; else every node computes the random
	// reshuffle from the seed.
	Balanced bool   `json:"balanced"`
	Reason   string `json:"reason"`
	// Digest is the SHA-256 of the orders of all parts (see EncodeOrders).
	Digest string    `json:"digest"`
	Orders string    `json:"orders,omitempty"`
	Rank   int       `json:"rank"` // the node that took it
	Time   time.Time `json:"time"`
}

// NodeDigest is what a node publishes of the orders it serves:
// digest-of-KKKKK-rank-RRRRR.json in the epoch's directory.
type NodeDigest struct {
	Epoch    int       `json:"epoch"`
	Parts    int       `json:"parts"`
	Rank     int       `json:"rank"`
	Digest   string    `json:"digest"`
	Balanced bool      `json:"balanced"`
	Time     time.Time `json:"time"`
}

// EncodeOrders is the canonical form of the orders of an epoch's parts,
// the content of an orders file and what a digest hashes: ordersMagic, the
// little-endian uint32 part count, then for each part the uint32 count of
// its ids and the ids as little-endian int32s.
func EncodeOrders(orders [][]int32) []byte {
	n := 8
	for _, o := range orders {
		n += 4 + 4*len(o)
	}
	b := make([]byte, 0, n)
	b = append(b, ordersMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(orders)))
	for _, o := range orders {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(o)))
		for _, id := range o {
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
	}
	return b
}

// Digest is the digest of orders: "sha256:" and the hex SHA-256 of
// EncodeOrders.
func Digest(orders [][]int32) string {
	sum := sha256.Sum256(EncodeOrders(orders))
	return digestPrefix + hex.EncodeToString(sum[:])
}

// decodeOrders reads EncodeOrders' form of parts orders of ids below
// records.
func decodeOrders(b []byte, parts int, records int64) ([][]int32, error) {
	if len(b) < 8 || string(b[:4]) != ordersMagic {
		return nil, errors.New("not an orders file")
	}
	if k := binary.LittleEndian.Uint32(b[4:]); int64(k) != int64(parts) {
		return nil, fmt.Errorf("holds the orders of %d parts, not %d", k, parts)
	}
	b = b[8:]
	out := make([][]int32, parts)
	for i := range out {
		if len(b) < 4 {
			return nil, fmt.Errorf("ends before part %d", i)
		}
		n := int64(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if int64(len(b)) < 4*n {
			return nil, fmt.Errorf("ends inside part %d", i)
		}
		o := make([]int32, n)
		for j := range o {
			o[j] = int32(binary.LittleEndian.Uint32(b[4*j:]))
			if o[j] < 0 || int64(o[j]) >= records {
				return nil, fmt.Errorf("part %d names record %d, which the dataset of %d records does not hold", i, o[j], records)
			}
		}
		out[i], b = o, b[4*n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%d bytes after the last part", len(b))
	}
	return out, nil
}
