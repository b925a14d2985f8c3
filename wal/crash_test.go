package wal

// crashForTest stops the log as a process crash would: the writer and the
// syncer stop without syncing anything, the files and the lock are closed,
// and whatever the file system holds unsynced stays there (the page cache
// survives a process crash). Appends in flight fail with ErrClosed.
func (l *Log) crashForTest() {
	l.closeOnce.Do(func() {
		close(l.closing)
		reply := make(chan error, 1)
		l.ctlCh <- control{kind: ctlCrash, reply: reply}
		<-reply
		<-l.done
		<-l.scrubDone
		l.closeFiles()
		l.closeErr = ErrClosed
	})
}
