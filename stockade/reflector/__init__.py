"""reflector"""
