"""What test modules share: hand-made traces and jobs, analysed warehouses, the command line as
users meet it. Test modules import from here (and conftest.py's fixtures), never from one
another."""
