module github.com/corgifs/corgifs/release

go 1.26.8

require github.com/corgifs/corgifs v0.0.0

// The release is built from the tree it is in.
replace github.com/corgifs/corgifs => ../
