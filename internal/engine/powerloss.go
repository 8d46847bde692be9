package engine

// coveredByLog lowers what checkAfter judges the tables the MANIFEST does
// not record by, when the log holds every write Badger may lack: the store
// keeps a log (the mark says so) and Badger holds the latest checkpoint,
// after which every write went to the log before Badger (the open replays
// it next). A power cut can catch a memtable flush between the sync of its
// table and the MANIFEST's: the memtable log the table came from was not
// synced since the checkpoint, so Badger comes back without the table's
// newer writes, and a check by versions alone would take that for a
// truncated MANIFEST (TestPowerLoss found it: the store refused to open).
// Those writes came after the checkpoint, so the log has them.
//
// Before a store has a log (written by Fast, or new), Badger's memtables
// kept logs of their own, which it replays: every write is in Badger after
// its open but the checkpoint's own. The first Durable open's checkpoint
// writes the mark (one commit) into a memtable that keeps no log and
// flushes it; a kill between that table's sync and the MANIFEST's leaves a
// table whose one commit newer than Badger's is the mark, which the
// checkpoint writes again (TestOpen_FirstDurableCheckpointCutOff; idem
// rekey killed on a Fast store found it refused).
func (e *Engine) coveredByLog(m *mark, pf preflight) preflight {
	switch have := e.db.MaxVersion(); {
	case m != nil && m.Log && e.checkMark(m) == nil:
		pf.maxQuarantined = min(pf.maxQuarantined, have)
	case (m == nil || !m.Log) && pf.maxQuarantined == have+1:
		pf.maxQuarantined = have
	}
	return pf
}
