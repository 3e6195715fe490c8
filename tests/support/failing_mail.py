"""An email backend that always fails, to exercise a failing notification step."""

from django.core.mail.backends.base import BaseEmailBackend


class FailingBackend(BaseEmailBackend):
    def send_messages(self, email_messages):
        raise ConnectionRefusedError("mail server refused the connection")
