package tests

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// launchEnv turns the test binary into a small launcher: it runs the command
// in its arguments and writes the command's peak resident size (KiB) to fd 3.
//
// Why: Linux keeps a process's peak RSS across execve, and Go starts children
// sharing the parent's memory until they exec, so a child of the test process
// reports at least the test process's own peak — hundreds of MiB after tests
// that hold data in memory. A child of a freshly started launcher inherits the
// launcher's few MiB instead.
const launchEnv = "CORGIFS_TEST_LAUNCH_RUSAGE"

func init() {
	if os.Getenv(launchEnv) == "" {
		return
	}
	os.Exit(launch(os.Args[1:]))
}

func launch(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = os.Environ()
	// The test kills the launcher on its time limit; the command goes with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		fmt.Fprintln(os.Stderr, "launcher:", err)
		return 127
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		if f := os.NewFile(3, "rss"); f != nil {
			fmt.Fprintf(f, "%d\n", ru.Maxrss)
			f.Close()
		}
	}
	return code
}

// launched returns a command that runs name with args through the launcher,
// and a function that, after the command ended, returns the peak resident
// size of name's process in KiB (0 if unknown).
func launched(cmd *exec.Cmd) (rss func() int64, err error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd.Args = append([]string{self, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = self
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, launchEnv+"=1")
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	return func() int64 {
		w.Close()
		b := make([]byte, 64)
		n, _ := r.Read(b)
		r.Close()
		v, _ := strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
		return v
	}, nil
}
