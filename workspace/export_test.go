package workspace

import "runtime"

func yieldOnce() { runtime.Gosched() }
