"""HTTP server: a Flask app factory (`create_app`) and the gunicorn launcher."""
