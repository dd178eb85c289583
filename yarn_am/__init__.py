"""The AppMaster: Dispatcher, ResourceManager, JobMasters, REST API and dashboard."""
