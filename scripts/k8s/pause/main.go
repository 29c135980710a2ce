// pause holds a pod's namespaces, as Kubernetes' pause container does: it sleeps until
// SIGINT or SIGTERM, and as PID 1 of a shared PID namespace it reaps orphaned children.
// A static Go binary (CGO_ENABLED=0), the only file of the image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("bulkhead pause")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "pause: %v, exiting\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
