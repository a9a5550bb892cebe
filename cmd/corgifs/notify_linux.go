package main

import (
	"fmt"
	"net"
	"os"
)

// sdNotify sends state (such as "READY=1") to the service manager when it
// asked for it with $NOTIFY_SOCKET (sd_notify(3)), and does nothing
// otherwise. The protocol is one datagram on a unix socket; a name starting
// with @ is in the abstract namespace, which Go's net package maps.
func sdNotify(state string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sd_notify %s: %w", addr, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify %s: %w", addr, err)
	}
	return nil
}
