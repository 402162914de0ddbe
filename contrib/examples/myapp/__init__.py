"""The app that contrib/examples/jobmaster.toml names (``app = ["myapp.jobs"]``):
a stand-in for yours, so the example can be checked and run as it is."""
