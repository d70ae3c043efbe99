// Eight goroutines write and read back 200 files each in the directory
// given, while one goroutine computes without ever yielding (the runtime
// preempts it with SIGURG, whose handler runs on the thread's signal
// stack) and the program sends itself SIGUSR1 through os/signal.
// Importing net links libc: the program is dynamically linked, so
// atoll's client library is loaded into it.
package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
)

func main() {
	_ = net.IPv4len
	dir := os.Args[1]
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGUSR1)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				p := filepath.Join(dir, fmt.Sprintf("g%d-%d", g, i))
				if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
					fmt.Println("write", err)
					return
				}
				b, err := os.ReadFile(p)
				if err != nil || string(b) != p {
					fmt.Println("read", err)
					return
				}
			}
		}(g)
	}
	var sum uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(0); i < 200_000_000; i++ {
			sum += i ^ (sum >> 3)
		}
	}()
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	fmt.Println("signal:", <-sigs)
	wg.Wait()
	ents, err := os.ReadDir(dir)
	fmt.Println(len(ents), err, sum)
}
