module github.com/corgifs/corgifs

go 1.26.8

require (
	github.com/dustin/go-humanize v1.1.0 // indirect
	github.com/hanwen/go-fuse/v2 v2.12.1 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/schollz/progressbar/v3 v3.19.1 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/term v0.47.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
