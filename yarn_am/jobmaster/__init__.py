"""The JobMaster of one job: its SlotPool, scheduler and ExecutionGraph."""
