"""The ResourceManager: its SlotManager and the drivers that start TaskExecutors."""
