//go:build !linux

package childproc

import "syscall"

// sysProcAttr returns nil: only Linux can tie a child's life to its parent.
func sysProcAttr() *syscall.SysProcAttr {
	return nil
}
